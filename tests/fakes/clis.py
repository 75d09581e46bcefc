"""The Claude Code and Codex CLIs for tests: the real ones (pinned, installed into
``.tools/`` by ``scripts/install-clis`` when missing), a fake for what they cannot do on
demand (``tests/fakes/bin/fake-cli``), and the process-table checks of the tests.

Without npm or the registry the CLI tests skip locally; under ``CI=true`` they fail."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from tests.services import unavailable

ROOT = Path(__file__).resolve().parents[2]
FAKE_CLI = ROOT / "tests" / "fakes" / "bin" / "fake-cli"
INSTALL = ROOT / "scripts" / "install-clis"


@functools.cache
def _install() -> Path | None:
    try:
        done = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    path = Path(done.stdout.strip().splitlines()[-1])
    return path if (path / "claude").exists() and (path / "codex").exists() else None


def installed_clis() -> Path:
    """The directory holding ``claude`` and ``codex`` (installing them once if needed)."""
    found = _install()
    if found is None:
        unavailable("the claude and codex CLIs (scripts/install-clis failed)")
        raise AssertionError("unreachable")
    return found


def group_alive(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    alive = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def gone(pids: list[int], timeout: float = 5.0) -> bool:
    """True once none of ``pids`` runs (zombies count as gone)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not any(_running(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_leftovers(pids: list[int]) -> None:
    """Clean up after a failed no-orphan assertion, so one failure does not leak."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
