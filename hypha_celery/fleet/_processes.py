"""Child processes of a fleet: start one (its output in ``<logs>/<name>.log``, in a
session of its own), stop a set (SIGTERM to each process group, SIGKILL after the grace
period), read a log's tail, wait for a port."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TAIL_LINES", "Child", "Running", "listening", "start", "stop", "tail",
           "wait_port"]

#: Lines of a dead child's log shown.
TAIL_LINES = 20


@dataclass(frozen=True)
class Child:
    """A process to run: its name (and log ``<name>.log``), its command line, whose
    first word is ``hypha``, ``celery`` or another program (``hypha`` and ``celery``
    are this interpreter's, resolved at start), variables for it alone that its command
    line shows (``shown``, ``HYPHA_METRICS_PORT``) and that it does not (``env``, a
    token), and whether the fleet restarts it when it dies (a private Redis it does not:
    its data went with it)."""

    name: str
    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    shown: Mapping[str, str] = field(default_factory=dict)
    restart: bool = True

    def line(self) -> str:
        """The command line, as a shell would run it (``shown`` variables first)."""
        return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in self.shown.items()),
                         shlex.join(self.argv)])


@dataclass
class Running:
    """A child started: its process and its log."""

    child: Child
    proc: subprocess.Popen[bytes]
    log: Path


def executable(argv: Sequence[str]) -> list[str]:
    """``argv`` with its program resolved: ``hypha`` and ``celery`` are this
    interpreter's, any other program is found on ``PATH``."""
    if argv[0] == "celery":
        return [sys.executable, "-m", "celery", *argv[1:]]
    if argv[0] == "hypha":
        script = Path(sys.executable).with_name("hypha")
        found = str(script) if script.is_file() else shutil.which("hypha")
        if found:
            return [found, *argv[1:]]
        return [sys.executable, "-c", "from hypha_celery.cli import main; main()", *argv[1:]]
    return [shutil.which(argv[0]) or argv[0], *argv[1:]]


def start(child: Child, logs: Path, env: Mapping[str, str], note: str | None = None
          ) -> Running:
    """Start ``child`` in a session of its own (its process group: a prefork pool's
    children too), its output appended to ``<logs>/<name>.log`` (after ``note``, a line
    of its own, when given)."""
    log = logs / f"{child.name}.log"
    with open(log, "ab") as out:
        if note is not None:
            out.write(f"--- {note} ---\n".encode())
            out.flush()
        proc = subprocess.Popen(executable(child.argv), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT,
                                env={**env, **child.shown, **child.env},
                                start_new_session=True)
    return Running(child, proc, log)


def stop(running: Sequence[Running], grace: float) -> None:
    """SIGTERM to each child's process group, SIGKILL to the groups still alive after
    ``grace`` seconds; reap them all."""
    for r in running:
        signal_group(r.proc, signal.SIGTERM)
    end = time.monotonic() + grace
    for r in running:
        with suppress(subprocess.TimeoutExpired):
            r.proc.wait(max(0.0, end - time.monotonic()))
    for r in running:
        signal_group(r.proc, signal.SIGKILL)  # the group: a prefork pool's children too
        r.proc.wait()


def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """``sig`` to ``proc``'s process group (gone already: nothing)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of ``path`` (none when it cannot be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Something accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> bool:
    """Wait until ``port`` listens (True), ``proc`` exits or ``timeout`` passes (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if listening(port):
            return True
        time.sleep(0.05)
    return False
