"""An in-process worker thread, threads pool, on the memory transport.

Threads pools have no time limits: node timeouts are enforced by fencing the
late result (see docs/architecture.md)."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

from celery import Celery
from celery.worker import WorkController

from hypha_celery.middleware._celery_signals import set_consumed_queues


class _Controller(WorkController):
    """A WorkController that tells when its consumer is ready."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        super().on_consumer_ready(consumer)
        _cap_drain_timeout(consumer.connection.transport)
        self.ready.set()


def _cap_drain_timeout(transport: Any, cap: float = 0.05) -> None:
    """Celery's loop for polling transports calls ``drain_events(timeout=2.0)`` and
    only sees a stop request when that returns: on the memory transport ``stop()``
    would take up to 2 s. Cap the wait of this one transport instance."""
    drain = transport.drain_events

    def drain_events(connection: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        return drain(connection, timeout=None if timeout is None else min(timeout, cap),
                     **kwargs)

    transport.drain_events = drain_events


class EmbeddedWorker:
    def __init__(self, app: Celery, queues: list[str], concurrency: int = 4) -> None:
        self._app = app
        self._queues = queues
        self._concurrency = concurrency
        self._worker: Any = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._app.finalize()
        self._app.set_current()
        self._app.set_default()  # the threads pool resolves tasks through the default app
        self._app.amqp.queues.select(self._queues)
        set_consumed_queues(self._app, frozenset(self._queues))
        self._worker = _Controller(
            app=self._app, pool_cls="threads", concurrency=self._concurrency,
            queues=self._queues, loglevel="WARNING", without_heartbeat=True,
            without_mingle=True, without_gossip=True, hostname="hypha-embedded@localhost",
        )
        self._thread = threading.Thread(target=self._worker.start, name="hypha-embedded-worker",
                                        daemon=True)
        self._thread.start()
        self._worker.ready.wait(10)

    def refresh(self, queues: list[str]) -> None:
        """Pick up tasks and queues registered after :meth:`start` (a graph
        registered once the worker runs): the consumer only knows the tasks it saw
        at start-up and would drop the new ones' messages as unregistered."""
        if not self.running:
            self._queues = queues
            return
        consumer = self._worker.consumer
        consumer.update_strategies()
        for queue in queues:
            if queue not in self._queues:
                consumer.call_soon(partial(consumer.add_task_queue, queue))
        self._queues = queues
        set_consumed_queues(self._app, frozenset(queues))

    def stop(self) -> None:
        if self._worker is not None:
            self._worker.stop(in_sighandler=False)
        if self._thread is not None:
            self._thread.join(10)
        self._worker = None
        self._thread = None
