"""docs/traces.md names what the code defines (its example runs in test_examples.py)."""

from __future__ import annotations

import re
from pathlib import Path

from hypha_celery.cli.evaluate import COMMANDS
from hypha_celery.replay import ReplaySpec

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Replay, evaluation and regression"


def section() -> str:
    """The replay / evaluation / regression section (other sections may share the page)."""
    text = (ROOT / "docs" / "traces.md").read_text()
    assert HEADING in text
    body = text.split(HEADING, 1)[1]
    following = re.search(r"^## ", body, re.M)
    return body[:following.start()] if following else body


def test_the_page_states_the_replay_spec_defaults() -> None:
    text = section()
    for name, field in ReplaySpec.model_fields.items():
        default = field.default
        shown = f'`"{default}"`' if isinstance(default, str) else f"`{default}`"
        assert re.search(rf"^\| `{name}` \| {re.escape(shown)} \|", text, re.M), name


def test_the_page_shows_every_command() -> None:
    text = section()
    for command in COMMANDS:
        assert f"hypha {command.name} " in text
