"""docs/traces.md: the replay / evaluation / regression example runs as shown (embedded
default, fresh directory), and the page names what the code defines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from hypha_celery.cli.evaluate import COMMANDS
from hypha_celery.replay import ReplaySpec

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Replay, evaluation and regression"


def section() -> str:
    """The replay / evaluation / regression section (other sections may share the page)."""
    text = (ROOT / "docs" / "traces.md").read_text()
    assert HEADING in text
    body = text.split(HEADING, 1)[1]
    following = re.search(r"^## ", body, re.M)
    return body[:following.start()] if following else body


def test_traces_example_runs_as_shown(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", section(), re.S)
    assert len(blocks) == 1
    script = tmp_path / "traces.py"
    script.write_text(blocks[0])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPHA_")}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "['answer']",
        "['model.call.started|1|mock-1', 'model.call.completed|1|mock-1']",
        "True",
        "passed",
        "{'total': 1, 'passed': 1, 'failed': 0}",
        "['eval.started', 'eval.completed', 'regression.started', 'regression.completed']",
    ]
    assert (tmp_path / "golden" / "qa-golden.replay.json").exists()
    assert (tmp_path / ".hypha" / "hypha.db").exists()


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
