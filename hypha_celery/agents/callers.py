"""Callers: proof that the process waiting on a queued ``ask`` is still there.

GenAgent drops a queued ask whose caller died (it monitors the caller's process). Here
the caller is a client (a :class:`~hypha_celery.agents.api.Agents` object) in a process
on any machine, so liveness is a lease: the first ask a client queues writes a
``hypha_leases`` row ``caller:<id>`` and starts a daemon thread that refreshes it every
lease interval until the client closes (``close`` deletes the row) or the process dies
(the row goes stale). A queued ask carries its caller's id; the worker about to take it
off the queue checks the row in the same transaction and, when it is missing or older
than ``STALE_AFTER`` intervals, removes the ask unrun: ``agent.request.cancelled`` with
``reason: caller_down``, a ``cancelled`` turn telemetry event (``caller_down``), and the
ask's outcome ``caller_down`` in case the caller was only stalled.

A caller whose ``ask`` timed out but whose process lives leaves its ask queued, as in
GenAgent. Costs: one upsert per lease interval per client process that has queued an
ask; one primary-key read when a queued ask is taken off the queue. An ask taken at once
(idle agent) carries no caller: it is never queued.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from contextlib import suppress

from hypha_celery.agents.doc import Request
from hypha_celery.middleware._process import on_fork
from hypha_celery.store import EventStore, Tx
from hypha_celery.store import agents as table

#: A caller heartbeat older than this many lease intervals means the caller is gone.
STALE_AFTER = 3.0
_PREFIX = "caller:"


class CallerLease:
    """This client's caller identity and its heartbeat thread (started on first use)."""

    def __init__(self, store: EventStore, interval: float) -> None:
        self.store = store
        self.interval = interval
        self.id = uuid.uuid4().hex
        self._started = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        on_fork(self._after_fork)

    def _after_fork(self) -> None:
        """A forked child is a caller of its own, its heartbeat thread not started."""
        self.id = uuid.uuid4().hex
        self._started = False
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    def ensure(self) -> str | None:
        """The caller id to put on a queued ask (its lease written and kept fresh), or
        None when leases are disabled."""
        if not self.enabled:
            return None
        with self._lock:
            if not self._started:  # first use (again after a fork)
                self._started = True
                self._stop = threading.Event()
                self._beat()
                threading.Thread(target=self._loop, args=(self._stop,), daemon=True,
                                 name="hypha-caller-lease").start()
        return self.id

    def close(self) -> None:
        """The caller is gone: its queued asks are dropped when their turn comes."""
        with self._lock:
            if not self._started:
                return
            self._stop.set()
            self._started = False
        with suppress(Exception):  # else the row goes stale
            self.store.drop_leases([_PREFIX + self.id])

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            with suppress(Exception):  # a missed beat only ages the row
                self._beat()

    def _beat(self) -> None:
        now = time.time()
        self.store.heartbeat([{"execution_id": _PREFIX + self.id, "run_id": "caller",
                               "worker": f"{socket.gethostname()}:{os.getpid()}",
                               "started_at": now, "heartbeat_at": now}])


def is_down(tx: Tx, request: Request, interval: float) -> bool:
    """Whether the caller of queued ``request`` is gone (read in ``tx``)."""
    if not request.caller or interval <= 0:
        return False
    beat = table.caller_beat(tx, _PREFIX + request.caller)
    return beat is None or time.time() - beat > STALE_AFTER * interval
