"""The agents' turn telemetry as Celery events (``hypha-agent-turn-*``): the sink a pump
task hands to :mod:`.telemetry`, sending through one dispatcher per worker process."""

from __future__ import annotations

import atexit
import logging
import threading
import time
from typing import Any

from celery import Celery, Task

from hypha_celery.middleware._process import on_fork

log = logging.getLogger(__name__)

__all__ = ["BATCH", "FLUSH_S", "celery_sink"]

#: A buffered turn event is published at most this many seconds after it was sent...
FLUSH_S = 0.05
#: ...or at once with this many waiting.
BATCH = 24


def celery_sink(task: Task) -> Any:
    """The sink of ``task``'s turn events; None when its worker sends no task events."""
    hostname = task.request.hostname
    if not task.app.conf.worker_send_task_events or hostname is None:
        return None
    dispatcher, task_id = _dispatchers.get(task.app, hostname), task.request.id

    def send(kind: str, fields: dict[str, Any]) -> None:
        dispatcher.send(kind, uuid=task_id, retry=False, **fields)

    return send


class _Dispatchers:
    """One Celery event dispatcher per app and worker name in a process, shared by its
    threads. Turn events are buffered and published in batches (``hypha.multi``, which
    Celery's event receivers, Flower's among them, split): by a flusher thread at most
    ``FLUSH_S`` after the first of a batch, or at once when ``BATCH`` are waiting.
    ``Task.send_event`` would build a dispatcher (a producer, a Redis client) per event,
    on the turn's own path. A forked child starts with none; at exit the buffer is
    flushed."""

    _lock: threading.Lock
    _made: dict[tuple[int, str], tuple[Celery, Any]]
    _waiting: threading.Event
    _flusher: threading.Thread | None

    def __init__(self) -> None:
        self._forget()
        on_fork(self._forget)
        atexit.register(self.flush)

    def get(self, app: Celery, hostname: str) -> Any:
        with self._lock:
            found = self._made.get((id(app), hostname))
            if found is None or found[0] is not app:
                found = (app, app.events.Dispatcher(
                    app.connection_for_write(), hostname=hostname, enabled=True,
                    buffer_group={"hypha"}, buffer_limit=BATCH,
                    on_send_buffered=self._waiting.set))
                self._made[(id(app), hostname)] = found
            if self._flusher is None:
                flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                           name="hypha-agent-events")
                flusher.start()
                self._flusher = flusher
            return found[1]

    def flush(self) -> None:
        with self._lock:
            dispatchers = [d for _, d in self._made.values()]
        for dispatcher in dispatchers:
            try:
                dispatcher.flush(errors=False, groups=True)
            except Exception as exc:  # telemetry never fails a turn
                log.warning("agent telemetry: sending Celery events failed: %s",
                            type(exc).__name__)

    def _flush_loop(self) -> None:
        while True:
            self._waiting.wait()
            time.sleep(FLUSH_S)  # let a batch gather
            self._waiting.clear()
            self.flush()

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._made = {}
        self._waiting = threading.Event()
        self._flusher = None


_dispatchers = _Dispatchers()
