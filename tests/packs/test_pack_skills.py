"""A pack declares skill directories (``skills``, relative to the pack file), loaded and
checked with it and exposed as a :class:`SkillRegistry`; its skill bindings (hypha's
``allowedSkills``, ``defaultSkills``, a state's ``allowedSkills`` / ``requiredSkills``)
are checked against them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hypha_celery.errors import PackError
from hypha_celery.packs import load_pack, overlay
from tests.skills.helpers import write_skill


def pack_doc(**extra: Any) -> dict[str, Any]:
    return {
        "id": "desk", "version": "1.0", "name": "Desk",
        "nodes": {"noop": {"set": {"done": True}}},
        "workflows": [{"id": "w", "version": "1", "initial_state": "Start",
                       "terminal_states": ["Done"],
                       "states": [{"id": "Start", "goal": "g", "node": "noop"},
                                  {"id": "Done", "goal": "end"}],
                       "transitions": [{"from": "Start", "to": "Done"}]}],
        **extra}


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    file = tmp_path / "pack.yaml"
    file.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return file


def problems(tmp_path: Path, doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(PackError) as caught:
        load_pack(write(tmp_path, doc))
    return list(caught.value.problems)


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    write_skill(tmp_path / "skills", "tone", {"name": "tone", "description": "d"})
    write_skill(tmp_path / "skills", "refunds", {"name": "refunds", "description": "d",
                                                 "version": "1"})
    return tmp_path


def test_a_pack_without_skills_has_an_empty_registry(tmp_path: Path) -> None:
    pack = load_pack(write(tmp_path, pack_doc()))
    assert pack.skills is None and len(pack.skill_registry) == 0


def test_declared_skills_load_with_the_pack(skills_dir: Path) -> None:
    doc = pack_doc(skills=["skills"], allowed_skills=["tone", "refunds"],
                   default_skills=["tone"])
    doc["workflows"][0]["states"][0].update(allowed_skills=["tone", "refunds"],
                                            required_skills=["tone"])
    pack = load_pack(write(skills_dir, doc))
    assert pack.skill_registry.ids == ("refunds", "tone")
    assert pack.default_skills == ["tone"]
    state = pack.workflows[0].states[0]
    assert (state.allowed_skills, state.required_skills) == (["tone", "refunds"], ["tone"])
    assert pack.to_doc()["skills"] == ["skills"]


def test_hypha_spelling_and_refs(skills_dir: Path) -> None:
    doc = pack_doc(skills=["skills"], allowedSkills=[{"id": "tone", "version": "0"}],
                   defaultSkills=["tone"])
    doc["workflows"][0]["states"][0].update(allowedSkills=["tone"], requiredSkills=["tone"])
    pack = load_pack(write(skills_dir, doc))
    assert pack.allowed_skills == ["tone"]
    assert pack.workflows[0].states[0].required_skills == ["tone"]


def test_a_bad_skill_is_a_pack_problem_naming_its_file(skills_dir: Path) -> None:
    write_skill(skills_dir / "skills", "broken", {"name": "broken"})
    found = problems(skills_dir, pack_doc(skills=["skills", "nowhere"]))
    assert found == [
        ("skills[0]", f"{skills_dir}/skills/broken/SKILL.md: description: required: a "
                      "non-empty string"),
        ("skills[1]", f"{skills_dir}/nowhere: not a directory")]


def test_a_skill_escaping_its_directory_fails_the_pack(skills_dir: Path) -> None:
    write_skill(skills_dir / "skills", "escape", {"name": "escape", "description": "d",
                                                  "on_activation": ["../tone/SKILL.md"]})
    [(where, message)] = problems(skills_dir, pack_doc(skills=["skills"]))
    assert where == "skills[0]" and "leaves the skill directory" in message


def test_a_skill_id_in_two_directories(skills_dir: Path) -> None:
    write_skill(skills_dir / "more", "tone", {"name": "tone", "description": "other"})
    assert problems(skills_dir, pack_doc(skills=["skills", "more"])) == [
        ("skills[1]", "skill id 'tone' is also in skills[0]")]


def test_bindings_must_name_declared_and_allowed_skills(skills_dir: Path) -> None:
    doc = pack_doc(skills=["skills"], allowed_skills=["tone", "ghost"],
                   default_skills=["refunds"])
    doc["workflows"][0]["states"][0].update(allowed_skills=["tone"],
                                            required_skills=["refunds"])
    assert problems(skills_dir, doc) == [
        ("workflows[0].states[0].required_skills",
         "required skill 'refunds' is not in the state's allowed_skills"),
        ("allowed_skills", "unknown skill 'ghost' (the pack's skills: refunds, tone)"),
        ("default_skills", "skill 'refunds' is not in the pack's allowed_skills"),
        ("workflows[0].states[0].required_skills",
         "skill 'refunds' is not in the pack's allowed_skills"),
    ]


def test_without_declared_skills_ids_are_not_resolved(tmp_path: Path) -> None:
    doc = pack_doc(allowed_skills=["elsewhere"])
    doc["workflows"][0]["states"][0]["required_skills"] = ["elsewhere"]
    assert load_pack(write(tmp_path, doc)).allowed_skills == ["elsewhere"]


def test_an_overlay_keeps_the_skills_directory(skills_dir: Path) -> None:
    base = load_pack(write(skills_dir, pack_doc(skills=["skills"])))
    changed = overlay(base, {"name": "Desk 2"})
    assert changed.skill_registry.ids == ("refunds", "tone")
