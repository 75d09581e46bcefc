"""A workflow hands work to an agent and resumes on its reply: :func:`hand_off`, a node.

The node publishes a message from ``workflow:<run_id>`` to ``agent:<name>`` (scoped by the
run's user and session, carrying the run id and the FSM state, its id derived from the
execution id: a later attempt publishes nothing new) and, unless the reply is there
already, parks the run (:class:`~hypha_celery.errors.AwaitingMessage`:
``run.suspended``): no worker waits. The reply's publish resumes it
(:func:`resumer`, a bus waker: the node runs again as its next attempt, finds the reply,
acknowledges it and returns it as the state's update); the recovery supervisor resumes a
run whose resume was lost and times out a wait past its ``timeout``. Every step is in the
run's log (``message.enqueued`` ... ``run.suspended``, ``run.released``,
``message.acknowledged``)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from hypha_celery.bus._agents import FAILED_TYPE
from hypha_celery.bus._bus import Bus, Waker
from hypha_celery.bus._model import (
    DeadLetterReason,
    EndpointKind,
    Message,
    Scope,
    agent,
    queue_key,
    workflow,
)
from hypha_celery.errors import AwaitingMessage, HandOffFailed, MessageAlreadyExists
from hypha_celery.events import TERMINAL_STATUSES
from hypha_celery.graph import NodeContext
from hypha_celery.runtime.coordinator import resume
from hypha_celery.runtime.core import Runtime

log = logging.getLogger(__name__)

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
    ``agent_name`` and returns ``{key: <the agent's answer text>}`` once it came (the run
    parked meanwhile); a dead-lettered hand-off raises :class:`HandOffFailed`, no reply
    within ``timeout`` seconds is the node's ``NodeTimeout`` (the node's retry policy
    applies to both)."""

    def node(state: Any, input: Any, ctx: NodeContext) -> dict[str, Any]:
        view = bus.store.get(ctx.run_id)
        scope = Scope(view.get("user_id") or ANONYMOUS, view.get("session_id") or ANONYMOUS)
        fsm = view.get("fsm")
        msg_id = "h-" + hashlib.sha256(ctx.execution_id.encode()).hexdigest()[:40]
        with contextlib.suppress(MessageAlreadyExists):  # a later attempt: sent before
            bus.publish(Message.model_validate({
                "id": msg_id, "type": HANDOFF_TYPE, "user_id": scope.user_id,
                "session_id": scope.session_id, "run_id": ctx.run_id,
                "from": workflow(ctx.run_id), "to": agent(agent_name),
                "payload": prompt(state, input), "fsm_state": None if fsm is None else fsm["state"],
                "correlation_id": msg_id, "step_id": ctx.node_id}))
        reply = bus.pull(workflow(ctx.run_id), scope, run_id=ctx.run_id,
                         correlation_id=msg_id)
        if reply is None:  # park the run: the reply's publish resumes it
            raise AwaitingMessage(msg_id, queue_key(scope, workflow(ctx.run_id)),
                                  time.time() + timeout)
        bus.acknowledge(reply.id)
        if reply.type == FAILED_TYPE:
            raise HandOffFailed(f"agent {agent_name!r} failed: {reply.payload}")
        return {key: reply.payload}

    return node


def resumer(bus: Bus, rt: Runtime) -> Waker:
    """A bus waker for messages to ``workflow:<run_id>``, right after their publish
    commits, in the publisher's process: it resumes the parked run a message answers; a
    message to a run that has ended (cancelled while it waited, say) is dead-lettered
    ``recipient_ended`` (no one would ever read it; it would hold its queue's bound)."""

    def wake(msg: Message, delay: float) -> None:
        if msg.to.kind is not EndpointKind.WORKFLOW or delay > 0:
            return  # a later message: the supervisor resumes the run once it is due
        try:
            if msg.correlation_id is not None and resume(rt, msg.to.id, msg.correlation_id):
                return
            view = bus.store.load(msg.to.id)
            if view is not None and view["status"] in TERMINAL_STATUSES:
                bus.fail(msg.id, DeadLetterReason.RECIPIENT_ENDED.value, dead_letter=True)
        except Exception as exc:  # the supervisor resumes it
            log.warning("hypha bus: resuming run %s failed: %s", msg.to.id,
                        type(exc).__name__)

    return wake
