"""docs/workflows.md: the example runs as shown (embedded default, fresh directory)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_workflows_example_runs_as_shown(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "workflows.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    expected = re.search(r"prints\n\n```\n(.*?)```", text, re.S)
    assert expected is not None
    script = tmp_path / "workflow.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPHA_")}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == expected.group(1).splitlines()
