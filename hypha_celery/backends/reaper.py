"""Reaper: a CLI's process group does not outlive the worker process that started it.

A CLI runs in its own session and process group (:mod:`.process`), so the worker's own
signals do not reach it, and a worker killed with SIGKILL never gets to kill it. The
reaper covers that case: one small watcher process per worker process (started at the
first CLI, in its own session) holds the read end of a pipe whose write end only the
worker holds. The worker tells it which groups are running (``+PGID`` / ``-PGID`` lines).
When the worker dies, however it dies, the kernel closes the write end; the watcher reads
end-of-file, sends SIGTERM to every group still registered, SIGKILL after a grace, and
exits. A worker that exits normally triggers the same sweep, after its own cleanup.

Why not ``PR_SET_PDEATHSIG``: it reaches only the process that set it (the CLI, not the
tools it spawned) and it needs ``preexec_fn``, which is unsafe in a threaded worker.

A forked child (a prefork pool process) does not inherit the parent's watcher: the
inherited write end is closed in the child, which starts its own watcher when it runs a
CLI. Run as a program, this file is the watcher (standard library only, ``-I -S``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

__all__ = ["forget", "watch", "watcher_pid"]

GRACE_S = 1.0


class _Reaper:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner = 0  # the pid whose watcher this is
        self._fd: int | None = None  # write end of the pipe
        self._proc: subprocess.Popen[bytes] | None = None

    def send(self, line: str) -> None:
        with self._lock:
            for _ in range(2):  # a dead watcher is replaced once
                fd = self._ensure()
                try:
                    os.write(fd, line.encode())
                    return
                except OSError:
                    self._drop()

    def pid(self) -> int | None:
        with self._lock:
            return self._proc.pid if self._proc is not None else None

    def _ensure(self) -> int:
        if self._fd is not None and self._owner == os.getpid():
            return self._fd
        read, write = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__)], stdin=read,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                close_fds=True)
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        threading.Thread(target=proc.wait, name="hypha-reaper-wait", daemon=True).start()
        self._fd, self._owner, self._proc = write, os.getpid(), proc
        return write

    def _drop(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd, self._proc = None, None

    def after_fork(self) -> None:
        """In a forked child: close the parent's write end (without it the parent's watcher
        would wait for this child too) and start fresh."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd, self._proc, self._owner = None, None, 0
        self._lock = threading.Lock()


_reaper = _Reaper()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reaper.after_fork)


def watch(pgid: int) -> None:
    """Kill process group ``pgid`` if this process dies before :func:`forget`."""
    _reaper.send(f"+{pgid}\n")


def forget(pgid: int) -> None:
    _reaper.send(f"-{pgid}\n")


def watcher_pid() -> int | None:
    """The pid of this process's watcher (tests), None before the first CLI."""
    return _reaper.pid()


# -- the watcher process ---------------------------------------------------------------------
def _kill(groups: set[int], sig: int) -> set[int]:
    alive = set()
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
            alive.add(pgid)
        except (ProcessLookupError, PermissionError):
            pass
    return alive


def _sweep(groups: set[int]) -> None:
    alive = _kill(groups, signal.SIGTERM)
    end = time.monotonic() + GRACE_S
    while alive and time.monotonic() < end:
        time.sleep(0.05)
        alive = _kill(alive, 0)
    _kill(alive, signal.SIGKILL)


def _main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    groups: set[int] = set()
    for raw in sys.stdin.buffer:
        line = raw.strip().decode("ascii", "replace")
        if len(line) > 1 and line[1:].isdigit() and int(line[1:]) > 1:
            if line[0] == "+":
                groups.add(int(line[1:]))
            elif line[0] == "-":
                groups.discard(int(line[1:]))
    _sweep(groups)


if __name__ == "__main__":
    _main()
