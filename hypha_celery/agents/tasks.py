"""The agents' one Celery task, ``hypha.agent.pump`` (body: :func:`.server.pump`).

It acks late and is requeued when its worker process dies, so a turn killed with its
worker is seen by the next delivery (and ends ``task_crashed``). Content-free turn
telemetry emitted while it runs is also sent as Celery events (``hypha-agent-turn-*``)
when the worker sends task events, through one dispatcher per worker process."""

from __future__ import annotations

import os
import threading
from typing import Any

from celery import Celery, Task

from hypha_celery.agents import telemetry
from hypha_celery.agents.runtime import AgentRuntime
from hypha_celery.agents.server import pump
from hypha_celery.runtime.config import AGENT_PUMP_TASK


def register(rt: AgentRuntime) -> None:
    @rt.app.task(name=AGENT_PUMP_TASK, bind=True, ignore_result=True, shared=False,
                 acks_late=True, reject_on_worker_lost=True)
    def agent_pump(self: Task, name: Any, incarnation: Any, token: Any) -> None:
        if not all(isinstance(v, str) for v in (name, incarnation, token)):
            return  # not ours: ids only, all strings
        token_ = telemetry.set_celery_sink(_celery_sink(self))
        try:
            pump(rt, name, incarnation, token)
        finally:
            telemetry.reset_celery_sink(token_)


def _celery_sink(task: Task) -> Any:
    hostname = task.request.hostname
    if not task.app.conf.worker_send_task_events or hostname is None:
        return None
    dispatcher, task_id = _dispatchers.get(task.app, hostname), task.request.id

    def send(kind: str, fields: dict[str, Any]) -> None:
        dispatcher.send(kind, uuid=task_id, retry=False, **fields)

    return send


class _Dispatchers:
    """One Celery event dispatcher per app and worker name in a process, shared by its
    threads (a dispatcher publishes under its own mutex). ``Task.send_event`` would
    build one per event: a producer from the pool, an exchange, then close them. A
    forked child starts with none (its parent's connection is not its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[tuple[int, str], tuple[Celery, Any]] = {}
        os.register_at_fork(after_in_child=self._forget)

    def get(self, app: Celery, hostname: str) -> Any:
        with self._lock:
            found = self._made.get((id(app), hostname))
            if found is None or found[0] is not app:
                found = (app, app.events.Dispatcher(app.connection_for_write(),
                                                    hostname=hostname, enabled=True))
                self._made[(id(app), hostname)] = found
            return found[1]

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._made = {}


_dispatchers = _Dispatchers()
