"""The agent state machine: every transition of the doc, as functions without I/O.

Each function takes the :class:`~.doc.AgentDoc` of a locked row (and what the caller read
in the same transaction: queued requests, the control column, the clock), changes the doc
and returns what the caller must do next (requests to finish, a token to publish, a step
to run). The client side (:mod:`.api`: admission, halt, resume, interrupt, cancel, drain,
stop) and the worker side (:mod:`.server`: claim, steps, turns, decisions, halt, stop)
both call these; neither writes a doc field itself.

The owner's order of work (GenAgent's ``process_next``), see :func:`next_step` and
:func:`after_events`: ``pre_run``; the current turn; deferred notifications (the caller
pops them); a pending halt; draining: stop; halted: idle, queue kept; the self-chain slot,
then the prompt FIFO; nothing left: idle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from hypha_celery.agents.behaviour import AgentDecision, Halt, Prompt
from hypha_celery.agents.channels import Target
from hypha_celery.agents.doc import (
    AgentDoc,
    CurrentTurn,
    Failed,
    OnHalt,
    Origin,
    Request,
    RequestOutcome,
    Sealed,
    Stage,
    outcome_of,
)
from hypha_celery.agents.options import Limits
from hypha_celery.agents.runtime import new_token
from hypha_celery.backends import Response, TurnError
from hypha_celery.errors import AgentError
from hypha_celery.graph.jsonsafe import is_json
from hypha_celery.lanes import json_size


class AgentStep(StrEnum):
    """What the owner does next."""

    PRE_RUN = "pre_run"
    DISPATCH = "dispatch"  # pre_turn, then the stream
    STREAM = "stream"  # the stream (no pre_turn: started in the choosing transaction)
    DECIDE = "decide"
    EVENT = "event"
    POST_RUN = "post_run"  # after the halt was applied
    STOP = "stop"
    TAKE = "take"  # make the next queued request current
    IDLE = "idle"


#: Steps whose choice left nothing only this task knows (a started stream, a popped
#: notification, an applied halt): a fresh pump message may take over before them.
RESUMABLE = frozenset({AgentStep.PRE_RUN, AgentStep.DISPATCH, AgentStep.DECIDE, AgentStep.STOP})


# -- creation and requests -------------------------------------------------------------
def new_doc(name: str, incarnation: str, kind: str, backend: str, limits: Limits,
            state: Any, session: Any, runs_pre_run: bool) -> AgentDoc:
    """A started agent. With a ``pre_run`` to run it is busy at once (a pump token)."""
    return AgentDoc(name, incarnation, kind, backend, limits, state, session,
                    pre_run=runs_pre_run, pump=new_token() if runs_pre_run else None)


def new_request(prompt: str, origin: Origin, *, completion: Target | None = None,
                stream_to: Target | None = None, on_halt: OnHalt = OnHalt.QUEUE) -> Request:
    return Request(new_token(), origin, prompt, 1, json_size(prompt), completion, stream_to,
                   on_halt)


def wake(doc: AgentDoc) -> str | None:
    """Hand an idle agent to a worker: the new pump token to publish (after commit), or
    None when a worker already has it."""
    if doc.pump:
        return None
    doc.pump = new_token()
    return doc.pump


def takes_it_now(doc: AgentDoc) -> bool:
    """An idle agent takes a prompt as its current turn at once; so does one whose only
    work is ``pre_run`` (calls wait for it, as GenAgent's do: the turn runs after it)."""
    if doc.halted or doc.current is not None:
        return False
    return not doc.pump or (doc.pre_run and doc.self_chain is None)


def accepting(doc: AgentDoc) -> None:
    """Refuse input while draining."""
    if doc.draining:
        raise AgentError("draining", f"agent {doc.name!r} is draining")


def admit(doc: AgentDoc, request: Request) -> bool:
    """Admit a caller's prompt: True when it became the current turn (then :func:`wake`),
    False when it must be queued. Raises ``draining``, or ``halted`` for ``on_halt="fail"``
    while halted."""
    accepting(doc)
    if request.on_halt is OnHalt.FAIL and doc.halted:
        raise AgentError("halted", f"agent {doc.name!r} is halted")
    if not takes_it_now(doc):
        return False
    doc.current = CurrentTurn(request)
    return True


def pending_tell(doc: AgentDoc, ref: str) -> bool | None:
    """Whether ``ref`` is the current turn or the self-chain and a tell (None: neither)."""
    for req in (None if doc.current is None else doc.current.request, doc.self_chain):
        if req is not None and req.ref == ref:
            return req.origin is Origin.TELL
    return None


def take_chained_tell(doc: AgentDoc, ref: str) -> Request | None:
    """Cancel a tell's pending retry in the self-chain slot (returns it)."""
    chain = doc.self_chain
    if chain is not None and chain.ref == ref and chain.origin is Origin.TELL:
        doc.self_chain = None
        return chain
    return None


# -- control (client side) -------------------------------------------------------------
def request_halt(doc: AgentDoc) -> bool:
    """Set ``halt_pending`` (applied by the owner); False when draining or halted."""
    if doc.draining or doc.halted:
        return False
    doc.halt_pending = True
    return True


def resume(doc: AgentDoc) -> bool:
    """Cancel a pending halt; True when the agent was halted (it no longer is)."""
    doc.halt_pending = False
    if not doc.halted:
        return False
    doc.halted = False
    return True


def interruptible(doc: AgentDoc, ref: str | None = None
                  ) -> Literal["accepted", "not_current", "idle"]:
    """Whether an interrupt of ``ref`` (any active turn when None) applies: a turn that is
    sealed and deciding can no longer be interrupted."""
    cur = doc.current
    if cur is None or cur.stage is Stage.DECIDING:
        return "idle"
    return "accepted" if ref is None or cur.ref == ref else "not_current"


def drain(doc: AgentDoc, queued: list[Request]) -> list[Request]:
    """Start draining (the caller checked it was not): the requests to fail ``draining``
    (``queued``, just cleared from the prompt lane, and the self-chain)."""
    doc.draining = True
    if doc.self_chain is not None:
        queued = [*queued, doc.self_chain]
        doc.self_chain = None
    return queued


def reset_check(doc: AgentDoc) -> None:
    """``reset_session`` runs only when idle."""
    accepting(doc)
    if doc.pump:
        raise AgentError("busy", f"agent {doc.name!r} is busy")


def terminate(doc: AgentDoc, queued: list[Request], reason: str
              ) -> list[tuple[Request, Failed]]:
    """End the agent: clear its turn and self-chain, and the outcome of every request
    left (the current turn, the self-chain, ``queued``). ``shutdown`` (``stop``) ends
    the asks ``agent_terminated``, tells get nothing; ``normal`` (a finished drain) ends
    all ``draining``; any other reason (a failed callback) ends all
    ``agent_terminated``."""
    left = [r for r in (None if doc.current is None else doc.current.request, doc.self_chain)
            if r is not None] + queued
    doc.current = doc.self_chain = None
    if reason == "shutdown":
        failed = Failed("agent_terminated", {"reason": reason})
        return [(r, failed) for r in left if r.origin is Origin.ASK]
    if reason == "normal":
        return [(r, Failed("draining")) for r in left]
    return [(r, Failed("agent_terminated", {"reason": reason})) for r in left]


# -- ownership (worker side) -----------------------------------------------------------
def claim(doc: AgentDoc, delivery: str, beat: float | None, lease_interval: float,
          stale_after: float) -> CurrentTurn | None | Literal[False]:
    """Take the agent for ``delivery``. False while another delivery owns it and still
    beats; else the turn its dead owner left streaming (now sealed ``task_crashed``), if
    any."""
    prior = doc.owner
    if prior not in (None, delivery) and lease_interval > 0 and beat is not None and \
            time.time() - beat < stale_after:
        return False
    doc.owner, doc.owned = delivery, True
    cur = doc.current
    if prior is not None and cur is not None and cur.stage is Stage.STREAMING:
        seal(cur, TurnError("task_crashed", {"exception": "WorkerLost"}))
        return cur
    return None


def owned_by(doc: AgentDoc, token: str, delivery: str | None) -> bool:
    """Whether the pump ``token`` (and, unless claiming, ``delivery``) still own it."""
    return doc.pump == token and (delivery is None or doc.owner == delivery)


def release(doc: AgentDoc) -> None:
    """An idle agent has no owner (run at the end of every owner transaction)."""
    if doc.pump is None:
        doc.owner, doc.owned = None, True


def hand_off(doc: AgentDoc) -> str:
    """Give the agent to a fresh pump message: its token."""
    doc.pump, doc.owner, doc.owned = new_token(), None, True
    return doc.pump


# -- the owner's steps -----------------------------------------------------------------
def next_step(doc: AgentDoc) -> AgentStep | None:
    """``pre_run``, or the current turn's step (dispatch it, or decide it); None: look at
    the notifications next."""
    if doc.pre_run:
        return AgentStep.PRE_RUN
    cur = doc.current
    if cur is None:
        return None
    return AgentStep.DISPATCH if cur.stage is Stage.QUEUED else AgentStep.DECIDE


def after_events(doc: AgentDoc) -> AgentStep:
    """With no notification left: halt, stop, take the next request, or go idle."""
    if doc.halting or doc.halt_pending:
        return AgentStep.POST_RUN
    if doc.draining:
        return AgentStep.STOP
    return AgentStep.IDLE if doc.halted else AgentStep.TAKE


def idle(doc: AgentDoc) -> None:
    doc.pump = None


def pre_run_done(doc: AgentDoc, state: Any) -> None:
    doc.state, doc.pre_run = state, False


def halt(doc: AgentDoc, queued: list[Request]) -> list[Request]:
    """GenAgent's ``transition_to_halted`` (``post_run`` runs next): halted; the queued
    tells that asked to fail on a halt (returned, to end ``halted``)."""
    doc.halted, doc.halting, doc.halt_pending = True, False, False
    return [r for r in queued if r.on_halt is OnHalt.FAIL]


def take_self_chain(doc: AgentDoc) -> bool:
    """Make the self-chain current; False when the slot is empty."""
    if doc.self_chain is None:
        return False
    doc.current, doc.self_chain = CurrentTurn(doc.self_chain), None
    return True


def make_current(doc: AgentDoc, request: Request) -> None:
    doc.current = CurrentTurn(request)


def decided(doc: AgentDoc, decision: AgentDecision) -> str | None:
    """Apply an event's (or an overload's) decision: its state, a halt; returns a
    ``Prompt``'s text for the caller to queue."""
    doc.state = decision.state
    if isinstance(decision, Halt):
        doc.halting = True
    return decision.text if isinstance(decision, Prompt) else None


# -- a turn ----------------------------------------------------------------------------
def start(doc: AgentDoc, cur: CurrentTurn, prompt: str, state: Any,
          control: str | None) -> bool:
    """Mark ``cur`` streaming with the prompt and state ``pre_turn`` gave; False when an
    interrupt came first (then it is sealed ``interrupted``)."""
    if control == cur.ref:
        seal(cur, TurnError("interrupted"))
        return False
    cur.stage, cur.sent, cur.started_at = Stage.STREAMING, prompt, time.time()
    doc.state = state
    return True


def seal(cur: CurrentTurn, result: Response | TurnError, keeps: bool = False,
         stream_state: Any = None) -> None:
    """Fix the outcome of ``cur`` (exactly one: an accepted interrupt wins over a late
    completion because the caller seals under the lock)."""
    keeps = keeps and is_json(stream_state)
    cur.stage = Stage.DECIDING
    cur.sealed = Sealed(outcome_of(result), stream_state if keeps else None, keeps)


def refuse(doc: AgentDoc, cur: CurrentTurn, state: Any, reason: str) -> Request | None:
    """``pre_turn`` refused the turn (``pre_turn_skipped|halted|invalid|crashed``): a
    caller's request ends with the reason (returned), a generated one is sealed with it
    (its ``handle_error`` runs)."""
    doc.state = state
    if reason == "pre_turn_halted":
        doc.halting = True
    if cur.origin.external:
        doc.current = None
        return cur.request
    seal(cur, TurnError(reason))
    return None


def sealed(cur: CurrentTurn) -> Sealed:
    assert cur.sealed is not None, "a deciding turn is sealed"
    return cur.sealed


@dataclass(frozen=True, slots=True)
class Recorded:
    """What recording a decided turn leaves to do: finish its request with ``outcome``
    (unless it is retried), queue a ``follow_up`` prompt."""

    outcome: RequestOutcome | None
    follow_up: str | None = None


def record(doc: AgentDoc, cur: CurrentTurn, decision: AgentDecision, state: Any) -> Recorded:
    """Record the decided turn: the new state, no current turn; a ``Prompt`` from
    ``handle_error`` of a caller's request retries it under the same ref (the self-chain
    slot, ``attempt + 1``), any other ``Prompt`` is a follow-up, a ``Halt`` halts."""
    outcome = sealed(cur).outcome
    doc.state, doc.current = state, None
    if isinstance(outcome, Failed) and isinstance(decision, Prompt) and \
            cur.origin.external and outcome.reason != "interrupted":
        req = cur.request
        doc.self_chain = Request(req.ref, req.origin, decision.text, req.attempt + 1,
                                 req.bytes, req.completion, req.stream_to, req.on_halt)
        return Recorded(None)
    if isinstance(decision, Halt):
        doc.halting = True
    return Recorded(outcome, decision.text if isinstance(decision, Prompt) else None)


def chain(doc: AgentDoc, request: Request) -> None:
    """A follow-up takes the self-chain slot (the caller checked its bytes)."""
    doc.self_chain = request


__all__ = ["RESUMABLE", "Recorded", "AgentStep", "accepting", "admit", "after_events", "chain",
           "claim", "decided", "drain", "halt", "hand_off", "idle", "interruptible",
           "make_current", "new_doc", "new_request", "next_step", "owned_by", "pending_tell",
           "pre_run_done", "record", "refuse", "release", "request_halt", "reset_check",
           "resume", "seal", "sealed", "start", "take_chained_tell", "take_self_chain",
           "takes_it_now", "terminate", "wake"]
