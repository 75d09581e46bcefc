"""The agents' one Celery task, ``hypha.agent.pump`` (body: :func:`.server.pump`).

It acks late and is requeued when its worker process dies, so a turn killed with its
worker is seen by the next delivery (and ends ``task_crashed``). Content-free turn
telemetry emitted while it runs is also sent as Celery events (``hypha-agent-turn-*``)
when the worker sends task events (:mod:`.celery_events`)."""

from __future__ import annotations

from typing import Any

from celery import Task

from hypha_celery.agents import telemetry
from hypha_celery.agents.celery_events import celery_sink
from hypha_celery.agents.runtime import AgentRuntime
from hypha_celery.agents.server import pump
from hypha_celery.runtime.config import AGENT_PUMP_TASK


def register(rt: AgentRuntime) -> None:
    @rt.app.task(name=AGENT_PUMP_TASK, bind=True, ignore_result=True, shared=False,
                 acks_late=True, reject_on_worker_lost=True)
    def agent_pump(self: Task, name: Any, incarnation: Any, token: Any) -> None:
        if not all(isinstance(v, str) for v in (name, incarnation, token)):
            return  # not ours: ids only, all strings
        token_ = telemetry.set_celery_sink(celery_sink(self))
        try:
            pump(rt, name, incarnation, token)
        finally:
            telemetry.reset_celery_sink(token_)
