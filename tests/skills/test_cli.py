"""``hypha skill validate DIR`` through the real console script."""

from __future__ import annotations

import os
from pathlib import Path

from tests.cli.helpers import hypha
from tests.skills.helpers import CLAUDE, FIXTURES, HYPHA, write_skill


def test_one_skill_directory() -> None:
    proc = hypha("skill", "validate", str(CLAUDE))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["ok  release-notes  -  reviewed  always"]


def test_a_directory_of_skills(tmp_path: Path) -> None:
    write_skill(tmp_path, "b", {"name": "b", "description": "d", "version": "2",
                                "trust": "trusted", "activation": "manual"})
    write_skill(tmp_path, "a", {"name": "a", "description": "d"})
    proc = hypha("skill", "validate", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["ok  a  -  reviewed  always",
                                        "ok  b  2  trusted  manual"]


def test_the_hypha_fixture() -> None:
    proc = hypha("skill", "validate", str(HYPHA))
    assert proc.stdout.splitlines() == ["ok  skill.refunds  1.2.0  trusted  keyword"]


def test_every_problem_is_one_line_and_exit_1(tmp_path: Path) -> None:
    write_skill(tmp_path, "good", {"name": "good", "description": "d"})
    write_skill(tmp_path, "no-description", {"name": "x"})
    write_skill(tmp_path, "escape", {"name": "e", "description": "d",
                                     "on_activation": ["../good/SKILL.md"]})
    write_skill(tmp_path, "yaml", "name: [\n")
    write_skill(tmp_path, "regex", {"name": "r", "description": "d",
                                    "activation": {"mode": "regex", "patterns": ["(a+)+"]}})
    link = write_skill(tmp_path, "link", {"name": "l", "description": "d",
                                          "on_activation": ["ref.md"]})
    os.symlink(tmp_path / "good" / "SKILL.md", link / "ref.md")
    proc = hypha("skill", "validate", str(tmp_path))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "ok  good  -  reviewed  always"
    problems = sorted(lines[1:])
    assert len(problems) == 5, lines
    assert problems[0].startswith(f"{tmp_path}/escape/../good/SKILL.md: on_activation: "
                                  "the path leaves the skill directory")
    assert problems[1] == f"{tmp_path}/link/ref.md: on_activation: a symlink: a skill's files " \
                          "may not pass through one"
    assert problems[2] == (f"{tmp_path}/no-description/SKILL.md: description: required: a "
                           "non-empty string")
    assert problems[3].startswith(f"{tmp_path}/regex/SKILL.md: activation.patterns[0]: never "
                                  "matches: unsafe pattern '(a+)+'")
    assert problems[4].startswith(f"{tmp_path}/yaml/SKILL.md: not valid YAML")


def test_nothing_to_validate(tmp_path: Path) -> None:
    proc = hypha("skill", "validate", str(FIXTURES))
    assert proc.returncode == 1
    assert proc.stdout.strip() == f"{FIXTURES}: no SKILL.md here nor in its subdirectories"
    missing = hypha("skill", "validate", str(tmp_path / "nope"))
    assert missing.returncode == 1
    assert "Traceback" not in missing.stdout + missing.stderr
