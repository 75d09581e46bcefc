"""What follows a transition, shared by the client and the worker: ending a request
(the ask's answer, the tell's bounded result, the completion through the outbox), sending
a completion, terminating an agent, and its cleanup callbacks."""

from __future__ import annotations

import logging

from hypha_celery import lanes
from hypha_celery.agents import machine, telemetry
from hypha_celery.agents.behaviour import acting_as
from hypha_celery.agents.channels import Completion, Target
from hypha_celery.agents.doc import AgentDoc, Origin, Request, RequestOutcome
from hypha_celery.agents.rows import AgentTx
from hypha_celery.agents.runtime import AgentRuntime, ref_channel
from hypha_celery.events import payloads as ev
from hypha_celery.middleware import Turn
from hypha_celery.store import agents as table

log = logging.getLogger(__name__)


def finish(atx: AgentTx, rt: AgentRuntime, request: Request, outcome: RequestOutcome) -> None:
    """Record the one outcome of a request: the ask's answer, and its asker woken after
    commit (the only waiter on a request: a tell's result is polled), the tell's cached
    result (bounded), the completion (through the outbox, sent after commit)."""
    ref, origin, out = request.ref, request.origin, outcome.to_json()
    if origin is Origin.ASK:
        atx.answer(ref, out)
        atx.after_commit(lambda: rt.notifier.publish(ref_channel(ref)))
    elif origin is Origin.TELL:
        limits = atx.doc.limits
        nbytes = lanes.json_size({"ref": ref, "outcome": out})
        table.put_result(atx.tx, atx.incarnation, ref, out, nbytes, limits.max_tell_results,
                         limits.max_tell_result_bytes)
    target = request.completion
    if target is not None:
        message = Completion(atx.name, ref, out)
        box = table.outbox(atx.tx, atx.incarnation, ref, target.to_json(), message.to_json())
        atx.after_commit(lambda: send(rt, box, target, message))


def send(rt: AgentRuntime, box: int, target: Target, message: Completion) -> None:
    """Deliver a completion and delete it from the outbox (left there on failure: the
    supervisor sends it later)."""
    try:
        rt.transport.deliver(target, message)
    except Exception as exc:
        log.warning("agent completion delivery failed: %s", type(exc).__name__)
        return
    table.sent(rt.store, box)


def terminate(atx: AgentTx, rt: AgentRuntime, reason: str) -> None:
    """End the agent in ``atx`` (``stop``: ``shutdown``; the owner: ``normal`` after a
    drain, or the failed callback): the outcome of what is left (see
    :func:`.machine.terminate`), its lanes, ``agent.stopped``, the row."""
    for request, outcome in machine.terminate(atx.doc, atx.take_queued(), reason):
        finish(atx, rt, request, outcome)
    atx.drop_lanes()
    atx.emit(ev.AgentStopped(reason=reason))
    atx.delete()


def cleanup(rt: AgentRuntime, doc: AgentDoc, reason: str) -> None:
    """``terminate_agent`` then the backend's ``terminate_session``; failures logged."""
    try:
        with acting_as(doc.name):
            rt.agent_class(doc.kind)().terminate_agent(reason, doc.state)
    except Exception as exc:
        log.warning("agent terminate_agent raised %s", type(exc).__name__)
    try:
        rt.new_backend(doc.backend).terminate_session(doc.session)
    except Exception as exc:
        log.warning("agent terminate_session raised %s", type(exc).__name__)
    telemetry.rich(("terminated",), doc.name, reason=reason)


def turn(name: str, request: Request) -> Turn:
    """What the turn hooks of the middleware are told about ``request``."""
    return Turn(name, request.ref, request.attempt, request.origin.value)


__all__ = ["cleanup", "finish", "send", "terminate", "turn"]
