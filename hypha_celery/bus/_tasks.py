"""The two Celery tasks of agent delivery (their bodies: :mod:`._agents`)."""

from __future__ import annotations

from typing import Any

from celery import Celery, Task

from hypha_celery.agents import Agents
from hypha_celery.bus._agents import DELIVER_TASK, REPLY_TASK, complete, deliver
from hypha_celery.bus._bus import Bus
from hypha_celery.bus._model import Scope


def register(bus: Bus, agents: Agents, app: Celery) -> None:
    """Register the two tasks of agent delivery on ``app``."""

    @app.task(name=DELIVER_TASK, bind=True, ignore_result=True, shared=False, acks_late=True,
              reject_on_worker_lost=True)
    def bus_deliver(self: Task, user_id: Any, session_id: Any, name: Any) -> None:
        if all(isinstance(v, str) for v in (user_id, session_id, name)):
            deliver(bus, agents, Scope(user_id, session_id), name)

    @app.task(name=REPLY_TASK, bind=True, ignore_result=True, shared=False, acks_late=True,
              reject_on_worker_lost=True)
    def bus_reply(self: Task, name: Any, ref: Any, outcome: Any, message_id: Any = None) -> None:
        if isinstance(name, str) and isinstance(message_id, str) and isinstance(outcome, dict):
            complete(bus, name, outcome, message_id)
