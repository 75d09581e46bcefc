"""Loading skill directories: Claude Code's layout unchanged, hypha's spelling, and the
bounds (sizes, counts, symlinks, paths that leave the directory)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from hypha_celery.errors import SkillError, SkillNotFound
from hypha_celery.skills import (
    ActivationMode,
    SideEffectPolicy,
    SkillFile,
    SkillLimits,
    SkillRegistry,
    TrustLevel,
    load_skill,
    parse_skill,
    scan_skills,
)
from tests.skills.helpers import CLAUDE, FIXTURES, HYPHA, write_skill


def test_a_claude_code_skill_loads_unchanged() -> None:
    skill = load_skill(CLAUDE)
    assert skill.id == skill.name == "release-notes"
    assert skill.description.startswith("Drafts release notes")
    assert skill.instructions.startswith("# Release notes")
    assert skill.allowed_tools == ("Read", "Grep", "Glob")
    assert skill.activation.mode is ActivationMode.ALWAYS
    assert skill.trust is TrustLevel.REVIEWED and skill.version is None
    assert skill.metadata == {"license": "Apache-2.0", "metadata": {
        "author": "hypha-celery tests", "category": "writing"}}
    helper = (CLAUDE / "scripts" / "helper.py").read_bytes()
    assert skill.scripts == (SkillFile("scripts/helper.py", len(helper),
                                       hashlib.sha256(helper).hexdigest()),)
    assert skill.references == ()  # reference.md is not on_activation: not loaded
    raw = (CLAUDE / "SKILL.md").read_bytes()
    assert skill.content_hash == hashlib.sha256(raw).hexdigest()
    assert skill.source == str(CLAUDE)


def test_a_hypha_skill_loads_its_references() -> None:
    skill = load_skill(HYPHA)
    assert skill.id == "skill.refunds" and skill.version == "1.2.0"
    assert skill.trust is TrustLevel.TRUSTED and skill.priority == 5
    assert skill.side_effect_policy is SideEffectPolicy.HUMAN_REVIEW
    assert [r.path for r in skill.references] == ["policy.md"]
    assert skill.references[0].text.startswith("Orders younger than 30 days")
    assert skill.metadata == {"reviewedBy": "support-leads"}


def test_references_change_the_content_hash(tmp_path: Path) -> None:
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d",
                                       "on_activation": ["ref.md"]}, files={"ref.md": "one"})
    before = load_skill(root).content_hash
    (root / "ref.md").write_text("two")
    assert load_skill(root).content_hash != before


def test_declared_assets_and_scripts_are_metadata(tmp_path: Path) -> None:
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d",
                                       "scripts": ["run.sh"], "assets": [{"path": "a.bin"}]},
                       files={"run.sh": "exit 1", "a.bin": "xyz", "scripts/other.py": "x"})
    skill = load_skill(root)
    assert [f.path for f in skill.scripts] == ["run.sh"]
    assert [(f.path, f.size) for f in skill.assets] == [("a.bin", 3)]


def _problem(root: Path, limits: SkillLimits | None = None) -> SkillError:
    with pytest.raises(SkillError) as caught:
        load_skill(root, limits=limits or SkillLimits())
    return caught.value


def test_a_file_over_the_size_bound(tmp_path: Path) -> None:
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d",
                                       "on_activation": ["big.md"]},
                       files={"big.md": "x" * (256 * 1024 + 1)})
    error = _problem(root)
    assert error.path == str(root / "big.md") and error.field == "on_activation"
    assert "more than the bound of 262144" in str(error)


def test_skill_md_over_the_size_bound(tmp_path: Path) -> None:
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d"}, "x" * 2000)
    error = _problem(root, SkillLimits(max_file_bytes=1000))
    assert error.path == str(root / "SKILL.md")


def test_too_many_activation_assets(tmp_path: Path) -> None:
    files = {f"r{i}.md": "x" for i in range(33)}
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d",
                                       "on_activation": list(files)}, files=files)
    error = _problem(root)
    assert "33 references, more than the 32 activation asset limit" in str(error)
    assert error.field == "on_activation"
    assert len(load_skill(root, limits=SkillLimits(max_activation_assets=33)).references) == 33


def test_the_skill_total_is_bounded(tmp_path: Path) -> None:
    files = {f"r{i}.md": "x" * 600 for i in range(3)}
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d",
                                       "on_activation": list(files)}, files=files)
    error = _problem(root, SkillLimits(max_skill_bytes=1500))
    assert "more than 1500 bytes" in str(error)


@pytest.mark.parametrize("ref", ["../outside.md", "sub/../../outside.md", "/etc/hostname",
                                 "C:\\outside.md", ""])
def test_paths_stay_inside_the_skill_directory(tmp_path: Path, ref: str) -> None:
    (tmp_path / "outside.md").write_text("secret")
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d",
                                       "on_activation": [ref]}, files={"sub/x.md": "x"})
    error = _problem(root)
    assert error.field == "on_activation"
    assert "secret" not in str(error)


def test_a_reference_through_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside.md").write_text("secret")
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d",
                                       "on_activation": ["link.md"]})
    os.symlink(tmp_path / "outside.md", root / "link.md")
    error = _problem(root)
    assert error.path == str(root / "link.md") and "symlink" in str(error)


def test_a_symlink_inside_the_directory_is_refused_too(tmp_path: Path) -> None:
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d",
                                       "on_activation": ["docs/a.md"]}, files={"real/a.md": "x"})
    os.symlink(root / "real", root / "docs")
    assert "symlink" in str(_problem(root))


def test_skill_md_through_a_symlink_is_refused(tmp_path: Path) -> None:
    elsewhere = write_skill(tmp_path, "elsewhere", {"name": "s", "description": "d"})
    root = tmp_path / "s"
    root.mkdir()
    os.symlink(elsewhere / "SKILL.md", root / "SKILL.md")
    error = _problem(root)
    assert error.path == str(root / "SKILL.md") and "symlink" in str(error)


def test_a_symlinked_script_is_refused(tmp_path: Path) -> None:
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d"},
                       files={"scripts/ok.py": "x"})
    os.symlink("/etc/hostname", root / "scripts" / "link.py")
    assert "symlink" in str(_problem(root))


def test_a_symlinked_skill_directory_is_refused(tmp_path: Path) -> None:
    real = write_skill(tmp_path / "real", "s", {"name": "s", "description": "d"})
    (tmp_path / "skills").mkdir()
    os.symlink(real, tmp_path / "skills" / "s")
    scan = scan_skills(tmp_path / "skills")
    assert scan.skills == () and "symlink" in str(scan.errors[0])


def test_a_missing_reference(tmp_path: Path) -> None:
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d",
                                       "on_activation": ["nope.md"]})
    error = _problem(root)
    assert error.path == str(root / "nope.md") and "no such file" in str(error)


def test_scan_reports_every_problem_and_duplicate_ids(tmp_path: Path) -> None:
    write_skill(tmp_path, "a", {"name": "a", "description": "d"})
    write_skill(tmp_path, "b", {"name": "b"})
    write_skill(tmp_path, "c", {"name": "a", "description": "again"})
    (tmp_path / "not-a-skill").mkdir()
    scan = scan_skills(tmp_path)
    assert [s.id for s in scan.skills] == ["a"]
    assert [(e.path, e.field) for e in scan.errors] == [
        (str(tmp_path / "b" / "SKILL.md"), "description"),
        (str(tmp_path / "c" / "SKILL.md"), "id")]


def test_scan_is_bounded(tmp_path: Path) -> None:
    for i in range(3):
        write_skill(tmp_path, f"s{i}", {"name": f"s{i}", "description": "d"})
    scan = scan_skills(tmp_path, limits=SkillLimits(max_skills=2))
    assert "more than 2 skills" in str(scan.errors[0])


def test_a_skill_directory_scans_as_itself() -> None:
    assert [s.id for s in scan_skills(CLAUDE).skills] == ["release-notes"]


def test_registry_from_dir_get_and_versions() -> None:
    registry = SkillRegistry.from_dir(FIXTURES / "hypha")
    assert registry.ids == ("skill.refunds",) and "skill.refunds" in registry
    assert registry.get("skill.refunds", "1.2.0").version == "1.2.0"
    with pytest.raises(SkillNotFound, match="version 1.2.0, not 2.0"):
        registry.get("skill.refunds", "2.0")
    with pytest.raises(SkillNotFound, match="no skill 'nope'"):
        registry.get("nope")


def test_registry_refuses_another_skill_under_an_id() -> None:
    registry = SkillRegistry([load_skill(CLAUDE)])
    registry.register(load_skill(CLAUDE))  # the same: a no-op
    with pytest.raises(SkillError, match="already registered"):
        registry.register(parse_skill("---\nname: release-notes\ndescription: other\n---\n"))


def test_registry_from_dir_raises_the_first_problem(tmp_path: Path) -> None:
    write_skill(tmp_path, "bad", "name: [\n")
    with pytest.raises(SkillError, match="not valid YAML"):
        SkillRegistry.from_dir(tmp_path)


def test_limits_are_positive() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        SkillLimits(max_chars=0)
