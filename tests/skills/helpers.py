"""Writing skill directories for the tests."""

from __future__ import annotations

from pathlib import Path

import yaml

from hypha_celery.jsontypes import JsonObject

FIXTURES = Path(__file__).parent / "fixtures"
CLAUDE = FIXTURES / "claude" / "release-notes"
HYPHA = FIXTURES / "hypha" / "refund-policy"


def skill_md(front: JsonObject | str, body: str = "Do the thing.") -> str:
    head = front if isinstance(front, str) else yaml.safe_dump(front, sort_keys=False)
    return f"---\n{head}---\n{body}\n"


def write_skill(parent: Path, folder: str, front: JsonObject | str, body: str = "Do the thing.",
                files: dict[str, str] | None = None) -> Path:
    """``parent/folder`` holding ``SKILL.md`` and ``files`` (relative path -> text)."""
    root = parent / folder
    root.mkdir(parents=True, exist_ok=True)
    (root / "SKILL.md").write_text(skill_md(front, body), encoding="utf-8")
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root
