"""The README's example runs as shown (embedded default, fresh directory)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_runs_as_shown(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    script = tmp_path / "example.py"
    script.write_text(code.group(1))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPHA_")}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "billing: 14 hits"
    assert "'run.completed'" in lines[1]
    assert (tmp_path / ".hypha" / "hypha.db").exists()


def test_readme_failure_example_runs_as_shown(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    script = tmp_path / "failures.py"
    script.write_text(blocks[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPHA_")}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["hello", "[1, 2]"]


def test_readme_agents_example_runs_as_shown(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    script = tmp_path / "agents.py"
    script.write_text(blocks[2])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPHA_")}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["lib/foo.py parses dates", "draft", "[]"]
