"""A workflow hands work to an agent and resumes on its reply: :func:`hand_off`, a node.

The node publishes a message from ``workflow:<run_id>`` to ``agent:<name>`` (scoped by the
run's user and session, carrying the run id and the FSM state, its id derived from the
execution id: a retried attempt publishes nothing new), then waits for the reply on the
workflow's queue (correlated by the message id), acknowledges it and returns it as the
state's update. The workflow then takes its next transition on the reply. Every step is
in the run's log (``message.enqueued`` ... ``message.acknowledged``)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from typing import Any, Final

from hypha_celery.bus._agents import FAILED_TYPE
from hypha_celery.bus._bus import Bus
from hypha_celery.bus._model import Message, Scope, agent, workflow
from hypha_celery.errors import HandOffFailed, MessageAlreadyExists
from hypha_celery.graph import NodeContext

#: The type of a workflow's hand-off message.
HANDOFF_TYPE: Final = "workflow.handoff"
#: The scope of a run that has no user or no session.
ANONYMOUS: Final = "anonymous"
#: Seconds a hand-off waits for the reply by default.
HANDOFF_TIMEOUT: Final = 300.0

NodeFn = Callable[[Any, Any, NodeContext], Any]


def hand_off(bus: Bus, agent_name: str, prompt: Callable[[Any, Any], str], *,
             key: str = "reply", timeout: float = HANDOFF_TIMEOUT) -> NodeFn:
    """A node ``fn(state, input, ctx)`` that sends ``prompt(state, input)`` to agent
    ``agent_name`` and returns ``{key: <the agent's answer text>}``; a dead-lettered
    hand-off or no reply within ``timeout`` raises :class:`HandOffFailed` (the node's
    retry policy applies)."""

    def node(state: Any, input: Any, ctx: NodeContext) -> dict[str, Any]:
        view = bus.store.get(ctx.run_id)
        scope = Scope(view.get("user_id") or ANONYMOUS, view.get("session_id") or ANONYMOUS)
        fsm = view.get("fsm")
        msg_id = "h-" + hashlib.sha256(ctx.execution_id.encode()).hexdigest()[:40]
        with contextlib.suppress(MessageAlreadyExists):  # a retried attempt: sent before
            bus.publish(Message.model_validate({
                "id": msg_id, "type": HANDOFF_TYPE, "user_id": scope.user_id,
                "session_id": scope.session_id, "run_id": ctx.run_id,
                "from": workflow(ctx.run_id), "to": agent(agent_name),
                "payload": prompt(state, input), "fsm_state": None if fsm is None else fsm["state"],
                "correlation_id": msg_id, "step_id": ctx.node_id}))
        reply = bus.receive(workflow(ctx.run_id), scope, run_id=ctx.run_id,
                            correlation_id=msg_id, timeout=timeout, cancelled=ctx.cancelled)
        if reply is None:
            raise HandOffFailed(f"agent {agent_name!r} did not reply within {timeout}s")
        bus.acknowledge(reply.id)
        if reply.type == FAILED_TYPE:
            raise HandOffFailed(f"agent {agent_name!r} failed: {reply.payload}")
        return {key: reply.payload}

    return node
