"""Running the real ``hypha`` console script."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HYPHA = str(Path(sys.executable).with_name("hypha"))


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without any HYPHA_* / NO_COLOR, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HYPHA_") and k != "NO_COLOR"}
    env.update(extra)
    return env


def hypha(*args: str, env: dict[str, str] | None = None, cwd: Path | str = ROOT,
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HYPHA, *args], cwd=cwd, env=env if env is not None else clean_env(),
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """Exit ``code``, exactly one ``hypha: error:`` line on stderr, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hypha: error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


@contextmanager
def module_restored(name: str) -> Iterator[None]:
    """In the block, ``name`` is not imported yet; after it, ``sys.modules[name]`` is as
    it was before: an app module a test imports in-process under its own environment (a
    broker URL) is neither one an earlier test cached nor the one a later test finds."""
    before = sys.modules.pop(name, None)  # the block imports its own, under its environment
    try:
        yield
    finally:
        if before is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before
