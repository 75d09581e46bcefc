"""Leases: proof that a slow node is still running — a middleware.

:class:`LeaseMiddleware` is installed first on every :class:`~hypha_celery.Hypha` whose
``HYPHA_LEASE_INTERVAL`` is above 0: ``before_attempt`` registers the execution,
``after_attempt`` drops it. A node in flight is tracked in memory. A daemon thread per
worker process wakes every ``interval`` seconds and upserts a ``hypha_leases`` row for
each node that has run for at least one interval, refreshing ``heartbeat_at`` while it
runs. A node that finishes within the interval — every fast node — writes nothing, so
leases cost nothing per step; a slow node (an LLM call) pays one unflushed write per
interval. The supervisor reads the rows: fresh heartbeat = alive, stale =
its worker is gone, none = never started (or fast and lost).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from hypha_celery.middleware import Attempt, AttemptEnd, Middleware
from hypha_celery.store import EventStore
from hypha_celery.store.recovery import LeaseRow

log = logging.getLogger(__name__)

#: Seconds between heartbeats (``HYPHA_LEASE_INTERVAL``).
DEFAULT_INTERVAL = 1.0
#: A heartbeat older than this many intervals means the worker is gone.
STALE_AFTER = 3.0


@dataclass
class _Flight:
    run_id: str
    worker: str
    started_at: float
    written: bool = False


_HOST = socket.gethostname()


def worker_name() -> str:
    """``host:pid`` of this process: read per call, because a prefork child imports the
    runtime in its parent, before the fork."""
    return f"{_HOST}:{os.getpid()}"


class LeaseMiddleware(Middleware):
    """Tracks the node executions in flight in this process (``host:pid``: its thread
    and worker name are made on first use in each process, a prefork child included:
    ``after_fork`` forgets the parent's)."""

    def __init__(self, store: EventStore, interval: float = DEFAULT_INTERVAL) -> None:
        self.store = store
        self.interval = interval
        self._flights: dict[str, _Flight] = {}
        self._lock = threading.Lock()
        self._worker = ""
        self._thread: threading.Thread | None = None

    def after_fork(self) -> None:
        """A forked child (a prefork pool process) tracks its own flights, under its
        own name, with a thread of its own (made at its first attempt)."""
        self._lock = threading.Lock()
        self._flights.clear()
        self._thread = None

    def before_attempt(self, attempt: Attempt) -> None:
        """Hold a lease on the execution until :meth:`after_attempt`."""
        self._ensure_thread()
        flight = _Flight(attempt.run_id, self._worker, time.time())
        with self._lock:
            self._flights[attempt.execution_id] = flight

    def after_attempt(self, attempt: Attempt, end: AttemptEnd) -> None:
        eid = attempt.execution_id
        with self._lock:
            flight = self._flights.pop(eid, None)
        if flight is not None and flight.written:
            self._safe(lambda: self.store.drop_leases([eid]))

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:  # first use (again after a fork)
                self._worker = worker_name()
                self._thread = threading.Thread(target=self._loop, name="hypha-leases",
                                                daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval)
            self._safe(self.beat)

    def beat(self, now: float | None = None) -> int:
        """Write heartbeats for every execution in flight for at least one interval."""
        now = time.time() if now is None else now
        with self._lock:
            due = [(eid, f) for eid, f in self._flights.items()
                   if now - f.started_at >= self.interval]
        rows = [{"execution_id": eid, "run_id": f.run_id, "worker": f.worker,
                 "started_at": f.started_at, "heartbeat_at": now} for eid, f in due]
        self.store.heartbeat(rows)
        for _, flight in due:
            flight.written = True
        return len(rows)

    @staticmethod
    def _safe(fn: object) -> None:
        try:
            fn()  # type: ignore[operator]
        except Exception as exc:  # a lost heartbeat only delays recovery
            log.warning("hypha lease heartbeat failed: %s", type(exc).__name__)


def alive(lease: LeaseRow | None, interval: float, now: float) -> bool:
    """Whether a lease row shows its worker alive."""
    return lease is not None and now - lease["heartbeat_at"] <= STALE_AFTER * interval
