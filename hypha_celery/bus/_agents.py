"""Agents on the bus: a message to ``agent:<name>`` becomes a prompt of that agent, and its
answer a reply on the bus.

A message published to an idle agent's queue (nothing queued or in flight before it,
available now) is delivered by the publishing transaction and handed to the agent with
``tell_with_completion`` right after the commit, in the publisher's process
(:func:`direct`: no hop). Any other message for an agent sends one wake-up task,
``hypha.bus.deliver``, to the agents' queue (``hypha.agents``, where the agents' pump
runs; ``countdown`` when the message is not yet available). The task pulls the agent's
queue and hands each message to the agent; the message stays ``delivered`` while the turn
runs, held for ``BusLimits.agent_hold_s`` (an hour) once the agent accepted it, not the
ack deadline: the agent sends one completion, and a turn longer than the ack deadline must
not be handed twice (a stopped agent sends none: past the hold, it is delivered again and
dead-lettered ``unknown_recipient``). The completion, ``hypha.bus.reply``, publishes the
answer (its text) to where the message's reply goes (``route[0]``, else ``reply_to``, else
``from``) and acknowledges the message in one transaction (:meth:`Bus.answer`); a failed
turn fails it with retry (backoff, then dead letter, and an ``agent.failed`` notice to the
end of the route). Both tasks ack late. A wake-up lost with the broker is only a nudge:
the recovery sweep (:func:`sweep`) re-sends one for every agent queue with a message
waiting longer than the grace period, and a delivery whose worker died comes back after
the ack deadline."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from celery import Celery, signature
from pydantic import BaseModel, ConfigDict, ValidationError

from hypha_celery.agents import Agents
from hypha_celery.agents.doc import Answered, outcome_from
from hypha_celery.bus._bus import Bus, Consumer, Waker
from hypha_celery.bus._model import (
    DeadLetterReason,
    Endpoint,
    EndpointKind,
    Message,
    MessageStatus,
    Scope,
    agent,
)
from hypha_celery.errors import (
    AgentError,
    AgentNotFound,
    BusError,
    MessageAlreadyExists,
    Overloaded,
)
from hypha_celery.runtime.config import AGENTS_QUEUE
from hypha_celery.runtime.core import AgentSweepDecision
from hypha_celery.store import bus as rows

log = logging.getLogger(__name__)

DELIVER_TASK: Final = "hypha.bus.deliver"
REPLY_TASK: Final = "hypha.bus.reply"
#: Messages one wake-up hands to the agent at most (a longer queue: the next wake-up).
DELIVER_BATCH: Final = 50
#: Seconds ahead a wake-up is sent with a countdown at most: a message available later is
#: woken by the recovery sweep once due (a countdown task waits in a worker's memory).
WAKE_HORIZON_S: Final = 60.0
#: The type of an agent's answer on the bus (its payload: the answer's text).
REPLY_TYPE: Final = "agent.reply"
#: The type of the notice sent when a message to an agent is dead-lettered.
FAILED_TYPE: Final = "agent.failed"


class AgentPrompt(BaseModel):
    """A message payload an agent takes: ``{"prompt": "..."}`` (or the prompt string)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str


class AgentFailure(BaseModel):
    """The payload of an ``agent.failed`` notice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: str
    message_id: str
    reason: str


def prompt_of(payload: Any) -> str | None:
    """The prompt a message payload carries, or None (a poison message)."""
    if isinstance(payload, str):
        return payload
    try:
        return AgentPrompt.model_validate(payload).prompt
    except ValidationError:
        return None


def celery_waker(app: Celery, ensure_worker: Callable[[], None] = lambda: None) -> Waker:
    """A :data:`Waker` sending ``hypha.bus.deliver`` for messages to agents (none for a
    message available more than :data:`WAKE_HORIZON_S` from now: the sweep wakes it)."""

    def wake(msg: Message, delay: float) -> None:
        if msg.to.kind is not EndpointKind.AGENT or delay > WAKE_HORIZON_S:
            return
        ensure_worker()
        app.send_task(DELIVER_TASK, args=(msg.user_id, msg.session_id, msg.to.id),
                      queue=AGENTS_QUEUE, countdown=delay if delay > 0 else None)

    return wake


def direct(bus: Bus, agents: Agents) -> Consumer:
    """The agents' direct consumer (:data:`~hypha_celery.bus.Consumer`): a message
    published to an idle agent's queue is delivered by ``publish`` itself and handed to
    the agent right after the commit, in the publisher's process (no wake-up task)."""
    return partial(_hand, bus, agents)


def deliver(bus: Bus, agents: Agents, scope: Scope, name: str) -> int:
    """Hand up to :data:`DELIVER_BATCH` messages of ``agent:name`` in ``scope`` to the
    agent; how many were pulled."""
    pulled = bus.pull_many(agent(name), scope, DELIVER_BATCH)
    for msg in pulled:
        _hand(bus, agents, msg)
    return len(pulled)


def _hand(bus: Bus, agents: Agents, msg: Message) -> None:
    prompt = prompt_of(msg.payload)
    if prompt is None:
        _failed(bus, bus.fail(msg.id, DeadLetterReason.POISON.value, dead_letter=True))
        return
    reply = signature(REPLY_TASK, kwargs={"message_id": msg.id}, queue=AGENTS_QUEUE)
    try:
        agents.tell_with_completion(msg.to.id, prompt, reply)
    except AgentNotFound:
        _failed(bus, bus.fail(msg.id, "unknown_recipient", dead_letter=True))
        return
    except (Overloaded, AgentError) as exc:  # full, draining, halted: later
        _failed(bus, bus.fail(msg.id, exc.reason, retry=True))
        return
    # the agent owns the prompt now and sends one completion (which settles the
    # message): hold it past the ack deadline, so a long turn is not handed twice
    bus.extend(msg.id, bus.limits.agent_hold_s)


def complete(bus: Bus, name: str, outcome: dict[str, Any], message_id: str) -> None:
    """The agent's turn for ``message_id`` ended: reply and acknowledge, or fail."""
    orig = bus.get(message_id)
    if orig is None or orig.status.terminal:
        return  # a duplicate completion
    result = outcome_from(outcome)
    if not isinstance(result, Answered):
        _failed(bus, bus.fail(orig.id, f"turn_failed:{result.reason}", retry=True))
        return
    to, route = orig.reply_target
    try:  # the reply and the acknowledgement in one transaction
        bus.answer(orig.id, _reply(orig, name, to, route, REPLY_TYPE, result.decode().text))
    except MessageAlreadyExists:  # answered before (a duplicate completion)
        bus.acknowledge(orig.id)
    except BusError as exc:  # the reply cannot go where it should
        _failed(bus, bus.fail(orig.id, f"reply_refused:{exc.code}", dead_letter=True))


def _reply(orig: Message, name: str, to: Endpoint, route: tuple[Endpoint, ...], kind: str,
           payload: Any) -> Message:
    digest = hashlib.sha256(f"{kind}|{orig.id}".encode()).hexdigest()[:40]
    return Message.model_validate({
        "id": f"re-{digest}", "type": kind, "user_id": orig.user_id,
        "session_id": orig.session_id, "run_id": orig.run_id, "from": agent(name), "to": to,
        "route": route, "payload": payload, "fsm_state": orig.fsm_state,
        "correlation_id": orig.correlation_id or orig.id, "causation_id": orig.id})


def _failed(bus: Bus, msg: Message) -> None:
    """A message to an agent that ended dead-lettered: an ``agent.failed`` notice to the
    end of its route (unless that is an agent: a notice is no prompt)."""
    if msg.status is not MessageStatus.DEAD_LETTERED:
        return
    end = msg.route[-1] if msg.route else (msg.reply_to or msg.from_)
    if end.kind is EndpointKind.AGENT:
        return
    notice = AgentFailure(agent=msg.to.id, message_id=msg.id, reason=msg.reason or "")
    try:
        bus.publish(_reply(msg, msg.to.id, end, (), FAILED_TYPE, notice.model_dump()))
    except BusError as exc:
        log.warning("hypha bus: the failure notice of %s was refused: %s", msg.id, exc.code)


def sweep(bus: Bus, wake: Waker, now: float, grace: float, kickoff_lease: float,
          limit: int) -> list[AgentSweepDecision]:
    """Re-send a wake-up for every agent queue with a message available for longer than
    ``grace`` seconds (its wake-up was lost with the broker); delete settled messages
    past the bus's retention (``BusLimits.retention_s``, a batch a sweep)."""
    _prune(bus, now)
    decisions: list[AgentSweepDecision] = []
    for queue in rows.stalled(bus.store, "agent", now, now - grace, limit):
        user_id, session_id, _kind, name = queue.split(":", 3)
        probe = Message.model_validate({
            "type": "wake", "user_id": user_id, "session_id": session_id,
            "from": {"kind": "runtime", "id": "supervisor"}, "to": agent(name)})
        try:
            wake(probe, 0.0)
        except Exception as exc:
            log.warning("hypha bus: re-waking %s failed: %s", queue, type(exc).__name__)
            continue
        decisions.append({"agent": name, "action": "bus_rewoken", "why": "messages_waiting"})
    return decisions


def _prune(bus: Bus, now: float) -> None:
    try:
        pruned = bus.prune(now - bus.limits.retention_s, bus.limits.prune_batch)
    except Exception as exc:  # the sweep goes on: the next one prunes
        log.warning("hypha bus: pruning settled messages failed: %s", type(exc).__name__)
        return
    if pruned:
        log.info("hypha bus: %d settled messages past retention deleted", pruned)
