"""One thread per process watches every agent this process owns: it beats their
heartbeats and ends a turn that was interrupted or whose agent was stopped.

Each pump task registers its agent while it owns it (:meth:`Watch.owning`) and its
running turn while the stream runs (:meth:`Watch.turn`). Every ``POLL_S`` the thread asks
the store, in one query, which watched turns must end: a turn whose ``control`` names it
(an interrupt) or whose agent is gone or replaced (a stop) has its ``on_stop`` called, on
a short-lived thread of its own (it cancels the backend's request, which may take a
moment). A turn registered with a :class:`Deadline` (its watchdog, when the stream runs on
the task's own thread) has the deadline's ``on_passed`` called the same way at the first
tick past it (at most ``POLL_S`` late). Every ``lease_interval`` it writes the heartbeat
of all owned agents in one statement. So a process running 500 turns costs one poll and
one heartbeat write per tick, not 500 of each.

The thread starts with the first registration in a process (again after a fork) and
exits once nothing has been registered for ``IDLE_EXIT_S``
(:class:`~hypha_celery.runtime.watcher.Watcher`, shared with the run watch).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from hypha_celery.runtime.watcher import IDLE_EXIT_S, Watcher, fire
from hypha_celery.store import EventStore
from hypha_celery.store import agents as table

log = logging.getLogger(__name__)

#: Seconds between two polls of the watched turns' control column.
POLL_S = 0.05

Key = tuple[str, str]  # (name, incarnation)


@dataclass(frozen=True, slots=True)
class Deadline:
    """Call ``on_passed`` once ``time.monotonic()`` reaches ``at``."""

    at: float
    on_passed: Callable[[], None]


@dataclass
class _Turn:
    key: Key
    ref: str
    on_stop: Callable[[], None]
    deadline: Deadline | None = None
    fired: bool = False


class Watch(Watcher):
    """The watcher of one agent runtime in this process."""

    name = "hypha-agent-watch"
    interval = POLL_S
    tables = ("owners", "turns")

    def __init__(self, store: EventStore, lease_interval: float) -> None:
        super().__init__()
        self.store = store
        self.lease_interval = lease_interval
        self._next_beat: float | None = None  # the first beat: a lease interval in

    @contextmanager
    def owning(self, name: str, incarnation: str) -> Iterator[None]:
        """Beat ``name``'s heartbeat every lease interval while the block runs."""
        if self.lease_interval <= 0:
            yield
            return
        with self.registered("owners", (name, incarnation)):
            yield

    def turn(self, name: str, incarnation: str, ref: str, on_stop: Callable[[], None],
             deadline: Deadline | None = None) -> AbstractContextManager[None]:
        """Call ``on_stop`` (once, from another thread) if turn ``ref`` is interrupted or
        its agent stopped while the block runs, or ``deadline.on_passed`` once it passed
        (whichever comes first)."""
        return self.registered("turns", _Turn((name, incarnation), ref, on_stop, deadline))

    @property
    def watched(self) -> tuple[int, int]:
        """(owned agents, running turns) registered in this process."""
        return self.count("owners"), self.count("turns")

    def tick(self, now: float, tables: dict[str, list[object]]) -> None:
        turns = [t for t in tables["turns"] if isinstance(t, _Turn) and not t.fired]
        for t in turns:
            if t.deadline is not None and now >= t.deadline.at:
                t.fired = True
                fire(t.deadline.on_passed, "hypha-agent-timeout")
        turns = [t for t in turns if not t.fired]
        if turns:
            _safe(lambda: self._poll(turns))
        if self._next_beat is None:
            self._next_beat = now + self.lease_interval
        if now >= self._next_beat:
            self._next_beat = now + self.lease_interval
            owners = sorted({o for o in tables["owners"] if isinstance(o, tuple)})
            if owners:
                _safe(lambda: table.heartbeats(self.store, owners))

    def _poll(self, turns: list[_Turn]) -> None:
        ending = table.stopped(self.store, [(*t.key, t.ref) for t in turns])
        for t in turns:
            if (*t.key, t.ref) in ending:
                t.fired = True
                fire(t.on_stop, "hypha-agent-stop")


def _safe(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception as exc:  # a missed poll or beat only delays: the next tick retries
        log.warning("hypha agent watch: %s", type(exc).__name__)


__all__ = ["IDLE_EXIT_S", "POLL_S", "Deadline", "Watch"]
