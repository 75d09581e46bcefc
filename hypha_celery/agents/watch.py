"""One thread per process watches every agent this process owns: it beats their
heartbeats and ends a turn that was interrupted or whose agent was stopped.

Each pump task registers its agent while it owns it (:meth:`Watch.owning`) and its
running turn while the stream runs (:meth:`Watch.turn`). Every ``POLL_S`` the thread reads
the control column of all watched turns in one query; a turn whose ``control`` names it
(an interrupt) or whose agent is gone or replaced (a stop) has its ``on_stop`` called, on
a short-lived thread of its own (it cancels the backend's request, which may take a
moment). Every ``lease_interval`` it writes the heartbeat of all owned agents in one
statement. So a process running 500 turns costs one poll and one heartbeat write per
tick, not 500 of each.

The thread starts with the first registration in a process (again after a fork) and
exits once nothing has been registered for ``IDLE_EXIT_S``.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from hypha_celery.store import EventStore
from hypha_celery.store import agents as table

log = logging.getLogger(__name__)

#: Seconds between two polls of the watched turns' control column.
POLL_S = 0.05
#: The thread exits after this many seconds with nothing to watch.
IDLE_EXIT_S = 5.0

Key = tuple[str, str]  # (name, incarnation)
V = TypeVar("V")


@dataclass
class _Turn:
    key: Key
    ref: str
    on_stop: Callable[[], None]
    fired: bool = False


class Watch:
    """The watcher of one agent runtime in this process."""

    def __init__(self, store: EventStore, lease_interval: float) -> None:
        self.store = store
        self.lease_interval = lease_interval
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._owners: dict[int, Key] = {}
        self._turns: dict[int, _Turn] = {}
        self._thread: threading.Thread | None = None
        self._pid = 0
        ref = weakref.WeakMethod(self._after_fork)
        os.register_at_fork(after_in_child=lambda: (m := ref()) is not None and m())

    def _after_fork(self) -> None:
        """A forked child has none of the parent's threads, and maybe a held lock."""
        self._lock = threading.Lock()
        self._thread, self._pid = None, 0

    # -- registration ----------------------------------------------------------------
    @contextmanager
    def owning(self, name: str, incarnation: str) -> Iterator[None]:
        """Beat ``name``'s heartbeat every lease interval while the block runs."""
        if self.lease_interval <= 0:
            yield
            return
        entry = self._add(self._owners, (name, incarnation))
        try:
            yield
        finally:
            self._remove(self._owners, entry)

    @contextmanager
    def turn(self, name: str, incarnation: str, ref: str,
             on_stop: Callable[[], None]) -> Iterator[None]:
        """Call ``on_stop`` (once, from another thread) if turn ``ref`` is interrupted or
        its agent stopped while the block runs."""
        entry = self._add(self._turns, _Turn((name, incarnation), ref, on_stop))
        try:
            yield
        finally:
            self._remove(self._turns, entry)

    def _add(self, into: dict[int, V], value: V) -> int:
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child: fresh state
                self._owners.clear()
                self._turns.clear()
                self._thread, self._pid = None, os.getpid()
            entry = next(self._ids)
            into[entry] = value
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="hypha-agent-watch",
                                                daemon=True)
                self._thread.start()
        return entry

    def _remove(self, into: dict[int, V], entry: int) -> None:
        with self._lock:
            into.pop(entry, None)

    @property
    def watched(self) -> tuple[int, int]:
        """(owned agents, running turns) registered in this process."""
        with self._lock:
            return len(self._owners), len(self._turns)

    # -- the thread --------------------------------------------------------------------
    def _loop(self) -> None:
        me = threading.current_thread()
        next_beat = time.monotonic() + self.lease_interval
        idle_since = time.monotonic()
        while True:
            time.sleep(POLL_S)
            now = time.monotonic()
            with self._lock:
                if self._thread is not me:
                    return
                owners = sorted(set(self._owners.values()))
                turns = [t for t in self._turns.values() if not t.fired]
                if owners or self._turns:
                    idle_since = now
                elif now - idle_since > IDLE_EXIT_S:
                    self._thread = None
                    return
            if turns:
                _safe(partial(self._poll, turns))
            if now >= next_beat:
                next_beat = now + self.lease_interval
                if owners:
                    _safe(partial(table.heartbeats, self.store, owners))

    def _poll(self, turns: list[_Turn]) -> None:
        controls = table.controls(self.store, sorted({t.key for t in turns}))
        for t in turns:
            gone = t.key not in controls
            if gone or controls[t.key] == t.ref:
                t.fired = True
                threading.Thread(target=_quietly, args=(t.on_stop,),
                                 name="hypha-agent-stop", daemon=True).start()


def _safe(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception as exc:  # a missed poll or beat only delays: the next tick retries
        log.warning("hypha agent watch: %s", type(exc).__name__)


def _quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception as exc:
        log.warning("hypha agent watch: stopping a turn raised %s", type(exc).__name__)


__all__ = ["IDLE_EXIT_S", "POLL_S", "Watch"]
