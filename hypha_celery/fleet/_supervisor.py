"""Keep a fleet of child processes running: a child that dies is restarted after a
back-off, up to a limit; past the limit (or with no restart policy) the fleet stops.

The policy (:class:`RestartPolicy`) is explicit: at most ``limit`` restarts of one child
within ``window`` seconds; the first after ``backoff`` seconds, each further one within
the window after twice the one before, at most ``max_backoff``. Every death, restart and
giving up is a :class:`Notice` handed to the caller (``hypha up`` prints one line each)."""

from __future__ import annotations

import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Literal

from hypha_celery.errors import SetupError
from hypha_celery.fleet._processes import Child, Running, signal_group, start, stop

__all__ = ["DEFAULT_RESTARTS", "Exited", "Fleet", "GaveUp", "Notice", "RestartPolicy",
           "Restarted", "Restarting", "exit_reason", "stop_requested", "supervise"]


@dataclass(frozen=True)
class RestartPolicy:
    """How a fleet restarts a child that died: at most ``limit`` restarts of one child
    within ``window`` seconds (one more death stops the fleet), after a back-off of
    ``backoff`` seconds doubled for each restart of that child within the window, at most
    ``max_backoff``."""

    limit: int = 5
    window: float = 600.0
    backoff: float = 1.0
    max_backoff: float = 30.0

    def __post_init__(self) -> None:
        if self.limit < 0:
            raise SetupError(f"a restart limit must be >= 0, got {self.limit}")
        if self.window <= 0 or self.backoff < 0 or self.max_backoff < self.backoff:
            raise SetupError("a restart policy needs window > 0 and "
                             "0 <= backoff <= max_backoff")

    def delay(self, recent: int) -> float:
        """The back-off before a restart that follows ``recent`` restarts in the window."""
        return float(min(self.backoff * 2 ** recent, self.max_backoff))


#: ``hypha up``'s default.
DEFAULT_RESTARTS = RestartPolicy()


def exit_reason(returncode: int) -> str:
    """``exited with code 1``, or ``was killed by SIGKILL`` for a signal."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


@dataclass(frozen=True)
class Restarting:
    """``child`` (``pid``) died; it starts again in ``delay`` seconds, restart ``number``
    of at most ``limit`` within ``window`` seconds."""

    child: Child
    pid: int
    returncode: int
    delay: float
    number: int
    limit: int
    window: float
    kind: Literal["restarting"] = "restarting"


@dataclass(frozen=True)
class Restarted:
    """``child`` runs again, as ``pid``."""

    child: Child
    pid: int
    kind: Literal["restarted"] = "restarted"


@dataclass(frozen=True)
class GaveUp:
    """``child`` died once more after ``limit`` restarts within ``window`` seconds: the
    fleet stops."""

    child: Child
    pid: int
    returncode: int
    log: Path
    limit: int
    window: float
    kind: Literal["gave_up"] = "gave_up"


@dataclass(frozen=True)
class Exited:
    """``child`` died and is not restarted (no restart policy, or a child that is never
    restarted): the fleet stops."""

    child: Child
    pid: int
    returncode: int
    log: Path
    kind: Literal["exited"] = "exited"


Notice = Restarting | Restarted | GaveUp | Exited


@dataclass
class _Pending:
    dead: Running
    due: float


@dataclass
class Fleet:
    """Children started in ``logs`` with ``env``, restarted by ``policy`` (None: a death
    stops the fleet), each death and restart told to ``notify``."""

    logs: Path
    env: dict[str, str]
    notify: Callable[[Notice], None]
    policy: RestartPolicy | None = DEFAULT_RESTARTS
    clock: Callable[[], float] = time.monotonic
    running: list[Running] = field(default_factory=list)
    _pending: list[_Pending] = field(default_factory=list)
    _restarts: dict[str, deque[float]] = field(default_factory=dict)

    def start(self, child: Child) -> Running:
        """Start ``child`` and watch it."""
        r = start(child, self.logs, self.env)
        self.running.append(r)
        return r

    def check(self) -> bool:
        """Restart the children due, note the ones that died: False when one died that
        is not to be restarted (the fleet must stop)."""
        now = self.clock()
        for pending in [p for p in self._pending if p.due <= now]:
            self._pending.remove(pending)
            self._restart(pending.dead)
        for r in [r for r in self.running if r.proc.poll() is not None]:
            self.running.remove(r)
            signal_group(r.proc, signal.SIGKILL)  # what it left behind (its pool)
            if not self._schedule(r, now):
                return False
        return True

    def _schedule(self, r: Running, now: float) -> bool:
        code = r.proc.returncode
        if self.policy is None or not r.child.restart:
            self.notify(Exited(r.child, r.proc.pid, code, r.log))
            return False
        recent = self._restarts.setdefault(r.child.name, deque())
        while recent and recent[0] <= now - self.policy.window:
            recent.popleft()
        if len(recent) >= self.policy.limit:
            self.notify(GaveUp(r.child, r.proc.pid, code, r.log, self.policy.limit,
                               self.policy.window))
            return False
        delay = self.policy.delay(len(recent))
        recent.append(now)
        self._pending.append(_Pending(r, now + delay))
        self.notify(Restarting(r.child, r.proc.pid, code, delay, len(recent),
                               self.policy.limit, self.policy.window))
        return True

    def _restart(self, dead: Running) -> None:
        note = f"restarted: pid {dead.proc.pid} {exit_reason(dead.proc.returncode)}"
        r = start(dead.child, self.logs, self.env, note=note)
        self.running.append(r)
        self.notify(Restarted(r.child, r.proc.pid))

    def stop(self, grace: float) -> int:
        """Stop every child (:func:`~hypha_celery.fleet.stop`); how many ran."""
        running, self.running = self.running, []
        self._pending.clear()
        stop(running, grace)
        return len(running)


def supervise(fleets: Sequence[Fleet], stopping: threading.Event, *, every: float = 0.2,
              tick: Callable[[], None] | None = None) -> int:
    """Check each of ``fleets`` every ``every`` seconds (calling ``tick`` first) until
    ``stopping`` is set (0) or a child dies that is not restarted (1). The caller stops
    the fleets (in the order it wants: a broker last)."""
    while not stopping.wait(every):
        if tick is not None:
            tick()
        if not all(fleet.check() for fleet in fleets):
            return 1
    return 0


@contextmanager
def stop_requested() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while in the block (the handlers restored after)."""
    event = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        event.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield event
    finally:
        for s, h in old.items():
            signal.signal(s, h)

