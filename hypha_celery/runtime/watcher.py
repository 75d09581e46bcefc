"""``Watcher``: one daemon thread per process that lives while something is registered
with it — the base of the agents' watch (heartbeats, interrupts) and the run watch
(cancels reaching blocked model calls).

A registration is a value in one of the watcher's named tables, added for the length of a
``with`` block. The first registration starts the thread (again in a forked child, which
has none of its parent's threads: the tables start empty there); every ``interval`` the
thread calls :meth:`Watcher.tick` with a snapshot of the tables taken under the lock; it
exits once nothing has been registered for ``IDLE_EXIT_S``. A failing tick is logged by
its type and retried at the next one. What a tick decides to stop runs on a short-lived
thread of its own (:func:`fire`): stopping may take a moment and must not hold up the
others.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypha_celery.middleware._process import on_fork

log = logging.getLogger(__name__)

__all__ = ["IDLE_EXIT_S", "Watcher", "fire"]

#: The thread exits after this many seconds with nothing registered.
IDLE_EXIT_S = 5.0


class Watcher:
    """Subclasses name their ``tables``, the thread's ``name`` and ``interval``, and
    implement :meth:`tick`."""

    name = "hypha-watch"
    interval = 0.2
    tables: tuple[str, ...] = ("entries",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._tables: dict[str, dict[int, Any]] = {t: {} for t in self.tables}
        self._thread: threading.Thread | None = None
        on_fork(self._after_fork)

    def _after_fork(self) -> None:
        """A forked child has none of the parent's threads, maybe a held lock, and
        nothing registered."""
        self._lock = threading.Lock()
        self._thread = None
        for table in self._tables.values():
            table.clear()

    @contextmanager
    def registered(self, table: str, value: Any) -> Iterator[None]:
        """``value`` is in ``table`` while the block runs."""
        entries = self._tables[table]
        with self._lock:
            entry = next(self._ids)
            entries[entry] = value
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name,
                                                daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                entries.pop(entry, None)

    def count(self, table: str) -> int:
        with self._lock:
            return len(self._tables[table])

    def tick(self, now: float, tables: dict[str, list[Any]]) -> None:
        """One round, outside the lock: ``tables`` holds what is registered now."""
        raise NotImplementedError

    def _loop(self) -> None:
        me, idle_since = threading.current_thread(), time.monotonic()
        while True:
            time.sleep(self.interval)
            now = time.monotonic()
            with self._lock:
                if self._thread is not me:
                    return
                snapshot = {name: list(t.values()) for name, t in self._tables.items()}
                if any(snapshot.values()):
                    idle_since = now
                elif now - idle_since > IDLE_EXIT_S:
                    self._thread = None
                    return
            try:
                self.tick(now, snapshot)
            except Exception as exc:  # a missed round only delays: the next one retries
                log.warning("%s: %s", self.name, type(exc).__name__)


def fire(stop: Callable[[], None], name: str) -> None:
    """Run ``stop`` on a short-lived daemon thread; a failure is logged by its type."""

    def run() -> None:
        try:
            stop()
        except Exception as exc:
            log.warning("%s: stopping raised %s", name, type(exc).__name__)

    threading.Thread(target=run, name=name, daemon=True).start()
