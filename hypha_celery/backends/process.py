"""``CliProcess``: one run of a command-line agent (Claude Code, Codex) as a subprocess whose
stdout is a JSONL stream.

* The CLI runs in a new session, hence its own process group: :meth:`CliProcess.kill`
  reaches it and everything it spawned (tool commands), SIGTERM then SIGKILL after a
  grace, from any thread, any number of times. The group is also registered with the
  :mod:`.reaper`, so it dies with the worker process even when that is SIGKILLed.
* The prompt goes to stdin (never to argv, which every user of the machine can read in
  the process table); keys go in the environment given by the caller, never in argv.
* stdout is read line by line: each line is one JSON object, at most ``max_line_bytes``
  bytes (``line_too_long``); a line that is not a JSON object is ``malformed_stream``; the
  whole turn is bounded by ``max_lines`` lines and ``max_bytes`` bytes
  (``stream_overflow``); ``idle_timeout`` seconds without a line kill the CLI
  (``timeout``, retryable).
* stderr is drained by a thread, keeping only the last ``STDERR_TAIL`` bytes, scrubbed of
  the turn's secrets and of key-shaped strings: it goes into the ``BackendError`` message
  of a failure and to the log, for operators, never into events.
* The end of the process: a non-zero exit code is ``cli_exit`` (the code in
  :attr:`CliProcess.returncode`), a kill by :meth:`kill` is ``cancelled``.

A missing executable is :class:`CliNotInstalled`, a ``BackendError`` whose text says how
to install it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from hypha_celery.backends import reaper
from hypha_celery.backends.error import BackendError
from hypha_celery.jsontypes import JsonObject

__all__ = ["STDERR_TAIL", "CliCommand", "CliNotInstalled", "CliProcess", "StreamLimits",
           "find_executable", "redact", "scrub"]

log = logging.getLogger(__name__)

STDERR_TAIL = 8192
KILL_GRACE_S = 2.0
EXIT_WAIT_S = 10.0  # after its stdout closed, the CLI has this long to exit
_KEYLIKE = re.compile(r"\b(sk|rk|pk|sess)-[A-Za-z0-9_\-]{6,}|(?i:bearer)\s+[^\s\"',}]+"
                      r"|(?i:(api[_-]?key|token|secret|password)[\"']?\s*[=:]\s*)[^\s\"',}]+")


class CliNotInstalled(BackendError):
    """The CLI's executable was not found; the text says how to install it."""

    def __str__(self) -> str:
        return f"{self._summary()}: {self.message}"


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """Per-turn bounds of one CLI run."""

    max_line_bytes: int = 4 * 1024 * 1024
    max_lines: int = 20_000
    max_bytes: int = 64 * 1024 * 1024
    idle_timeout: float = 600.0


@dataclass(frozen=True)
class CliCommand:
    """What to run: ``argv`` (no secret, no prompt), the complete environment (it may hold
    the key), the text for stdin, the working directory and the secrets to scrub."""

    argv: tuple[str, ...]
    env: dict[str, str]
    stdin: str
    cwd: str | None = None
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def __repr__(self) -> str:  # the environment holds the key
        return f"CliCommand(argv={self.argv!r}, cwd={self.cwd!r})"


def find_executable(provider: str, name: str, hint: str, path: str | None = None) -> str:
    """The absolute path of ``name`` (a path, or a name looked up on ``path`` / ``$PATH``),
    else :class:`CliNotInstalled` with ``hint``."""
    found = shutil.which(name, path=path)
    if found is None:
        raise CliNotInstalled(provider, "cli_not_installed", False,
                              message=f"{name!r} was not found: {hint}")
    return os.path.abspath(found)


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` without the exact ``secrets`` (model text: nothing else is touched)."""
    for secret in secrets:
        if secret and len(secret) >= 4 and secret in text:
            text = text.replace(secret, "[redacted]")
    return text


def scrub(text: str, secrets: Sequence[str], limit: int = 2000) -> str:
    """Operator text (stderr, error messages): no secret, no key-shaped string, bounded."""
    return _KEYLIKE.sub("[redacted]", redact(text, secrets))[-limit:]


class CliProcess:
    """One run of ``command``; see the module docstring. Use :meth:`lines` once."""

    def __init__(self, provider: str, command: CliCommand,
                 limits: StreamLimits = StreamLimits(), kill_grace: float = KILL_GRACE_S
                 ) -> None:
        self.provider = provider
        self.command = command
        self.limits = limits
        self.kill_grace = kill_grace
        self.returncode: int | None = None
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._killed: str | None = None  # why: "cancelled", "timeout", or a failure kind
        self._stderr = bytearray()
        self._threads: list[threading.Thread] = []
        self._last_line = time.monotonic()
        self._done = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the CLI (a no-op after :meth:`kill`). Raises :class:`BackendError`."""
        with self._lock:
            if self._killed is not None or self._proc is not None:
                return
            try:
                proc = subprocess.Popen(
                    self.command.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, env=self.command.env, cwd=self.command.cwd,
                    start_new_session=True, close_fds=True)
            except FileNotFoundError:
                raise CliNotInstalled(self.provider, "cli_not_installed", False,
                                      message=f"{self.command.argv[0]!r} was not found"
                                      ) from None
            except OSError as exc:
                raise BackendError(self.provider, "cli_start_failed", False,
                                   message=f"{type(exc).__name__}: errno {exc.errno}") from None
            self._proc = proc
            reaper.watch(proc.pid)
        self._spawn(self._feed, proc.stdin, "stdin")
        self._spawn(self._drain, proc.stderr, "stderr")
        self._spawn(self._watch_idle, None, "idle")

    def lines(self) -> Iterator[JsonObject]:
        """The JSON objects of stdout, in order, until the CLI closes it. Raises
        :class:`BackendError` (``line_too_long``, ``malformed_stream``,
        ``stream_overflow``, ``timeout``, ``cancelled``) after killing the CLI."""
        self.start()
        proc = self._proc
        if proc is None or proc.stdout is None:
            raise self._killed_error()
        count = total = 0
        limit = self.limits.max_line_bytes
        while True:
            raw = proc.stdout.readline(limit + 1)
            if not raw:
                return
            self._last_line = time.monotonic()
            count, total = count + 1, total + len(raw)
            if len(raw) > limit:
                raise self._fail("line_too_long", f"a stdout line passed {limit} bytes")
            if count > self.limits.max_lines or total > self.limits.max_bytes:
                raise self._fail("stream_overflow", f"the turn passed {self.limits.max_lines} "
                                 f"lines / {self.limits.max_bytes} bytes of output")
            if not raw.strip():
                continue
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
            if not isinstance(doc, dict):
                raise self._fail("malformed_stream", f"stdout line {count} is not a JSON object")
            yield doc

    def finish(self) -> int:
        """Wait for the exit (``EXIT_WAIT_S`` at most, then kill), clean the group up and
        return the exit code. Raises ``cancelled`` / ``timeout`` when :meth:`kill` ended it."""
        proc = self._proc
        if proc is None:
            raise self._killed_error()
        try:
            code = proc.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.kill("cli_hung")
            code = proc.wait()
        self.close()
        self.returncode = code
        with self._lock:
            killed = self._killed
        if killed is not None:
            raise self._killed_error()
        return code

    def kill(self, why: str = "cancelled") -> None:
        """Kill the whole process group: SIGTERM, then SIGKILL after ``kill_grace``.
        Any thread, idempotent; returns once the group is gone (or after the SIGKILL)."""
        with self._lock:
            if self._killed is None:
                self._killed = why
            proc = self._proc
        if proc is not None:
            self._kill_group(proc)

    def close(self) -> None:
        """Release everything: kill what is left of the group, join the helper threads."""
        proc = self._proc
        self._done.set()
        if proc is None:
            return
        self._kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.returncode = proc.wait(self.kill_grace) if self.returncode is None \
                else self.returncode
        for thread in self._threads:
            thread.join(self.kill_grace)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        reaper.forget(proc.pid)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stderr_tail(self) -> str:
        with self._lock:
            text = self._stderr.decode("utf-8", "replace")
        return scrub(text, self.command.secrets, STDERR_TAIL)

    def error(self, kind: str, message: str, retryable: bool = False,
              status: int | None = None) -> BackendError:
        """A failure of this run: the message gets the scrubbed stderr tail."""
        tail = self.stderr_tail()
        text = scrub(message, self.command.secrets)
        if tail:
            text = f"{text}\n-- stderr (tail) --\n{tail}"
            log.warning("%s CLI failed (%s): %s", self.provider, kind, text)
        return BackendError(self.provider, kind, retryable, status, message=text)

    # -- internals -----------------------------------------------------------------------
    def _fail(self, kind: str, message: str) -> BackendError:
        self.kill(kind)
        return self.error(kind, message)

    def _killed_error(self) -> BackendError:
        with self._lock:
            why = self._killed or "cancelled"
        if why == "timeout":
            return self.error("timeout", f"no output for {self.limits.idle_timeout} s",
                              retryable=True)
        if why == "cli_hung":
            return self.error("cli_hung", "the CLI did not exit after its last line")
        if why == "cancelled":
            return BackendError(self.provider, "cancelled", False,
                                message="the CLI was killed by cancel()")
        return self.error(why, "the CLI was killed")

    def _kill_group(self, proc: subprocess.Popen[bytes]) -> None:
        if not _signal_group(proc.pid, signal.SIGTERM):
            proc.poll()
            return
        end = time.monotonic() + self.kill_grace
        while time.monotonic() < end:
            proc.poll()  # reap the leader, or the group never looks empty
            if not _group_alive(proc.pid):
                return
            time.sleep(0.02)
        _signal_group(proc.pid, signal.SIGKILL)
        try:
            proc.wait(self.kill_grace)
        except subprocess.TimeoutExpired:
            log.error("%s CLI pid %s survived SIGKILL", self.provider, proc.pid)

    def _spawn(self, target: Any, stream: IO[bytes] | None, name: str) -> None:
        thread = threading.Thread(target=target, args=(stream,), daemon=True,
                                  name=f"hypha-cli-{name}")
        self._threads.append(thread)
        thread.start()

    def _feed(self, stdin: IO[bytes] | None) -> None:
        if stdin is None:
            return
        try:
            stdin.write(self.command.stdin.encode())
            stdin.flush()
        except OSError:  # the CLI exited or closed stdin without reading it
            pass
        finally:
            with contextlib.suppress(OSError):
                stdin.close()

    def _drain(self, stderr: IO[bytes] | None) -> None:
        if stderr is None:
            return
        fd = stderr.fileno()
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self._stderr += chunk
                if len(self._stderr) > 2 * STDERR_TAIL:
                    del self._stderr[:-STDERR_TAIL]

    def _watch_idle(self, _: object) -> None:
        timeout = self.limits.idle_timeout
        while not self._done.wait(min(1.0, timeout / 4)):
            if time.monotonic() - self._last_line > timeout:
                self.kill("timeout")
                return


def _group_alive(pgid: int) -> bool:
    """Whether the group has a member that is not a zombie. Orphaned zombies stay in the
    group until init reaps them (seconds, in some containers): on Linux ``/proc`` tells
    them apart; elsewhere a zombie counts as alive (the SIGKILL after the grace is then
    harmless)."""
    if not _signal_group(pgid, 0):
        return False
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return True
    for name in entries:
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False when it has no member left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed its credentials: it is still there
        return True
    return True
