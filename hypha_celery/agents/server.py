"""The owner of an agent for the moment: the ``hypha.agent.pump`` task's body.

An agent is idle (no task, no memory anywhere) until an input arrives; the caller that
finds it idle sets the doc's ``pump`` to a fresh token and publishes one pump message. The
worker that takes it owns the agent until the mailbox is empty, doing one *step* at a time,
each chosen under the agent's row lock (GenAgent's ``process_next``, see
:mod:`.machine`, which holds every change of the doc):

1. ``pre_run`` once after start;
2. the current turn: dispatch it (``pre_turn``, then the stream, see :mod:`.stream`), or
   decide it (``handle_response`` / ``handle_error``, ``post_turn``, record the outcome);
3. deferred notifications, one ``handle_event`` each, in arrival order;
4. a pending halt (``transition_to_halted``: fail ``on_halt="fail"`` tells, ``post_run``);
5. draining: stop;
6. halted: go idle, keep the queue;
7. the self-chain slot (a caller-owned retry or a follow-up), then the prompt FIFO;
8. nothing left: clear the token and go idle.

Callbacks run outside the lock; every write re-checks, under the lock, that this task
still owns the agent and the turn is the one it ran (fencing), so a result that lost a
race (interrupt, stop, a replacement agent) is never applied. A second delivery of the same
pump message means the first owner died (``task_reject_on_worker_lost``, or the supervisor
re-drove it after the owner's heartbeat stopped): a turn it left streaming ends
``task_crashed``, delivered once. A task hands the agent to a fresh message after
``MAX_TURNS`` turns or ``MAX_TASK_S`` seconds. Turn telemetry goes through the runtime's
middleware (``before_turn``, ``after_turn``, ``after_turn_rejected``,
``after_turn_cancelled``). A turn whose stream reported thinking (``reasoning``
events) writes ``thinking.started`` / ``thinking.completed`` into the agent's log with
its character count (never the text), before its ``agent.turn.completed | failed``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypedDict

from hypha_celery import lanes
from hypha_celery.agents import callbacks, callers, effects, machine, rows, telemetry
from hypha_celery.agents.behaviour import Agent, AgentDecision, Halt, NoReply, Prompt, acting_as
from hypha_celery.agents.channels import Streamed
from hypha_celery.agents.context import TurnContext, context_of
from hypha_celery.agents.doc import AgentDoc, CurrentTurn, Failed, Origin, Request, Stage
from hypha_celery.agents.live import publish_end, publish_event
from hypha_celery.agents.machine import AgentStep
from hypha_celery.agents.rows import AgentTx
from hypha_celery.agents.runtime import AgentRuntime, new_token
from hypha_celery.agents.stream import Attempt, run_attempt
from hypha_celery.agents.watch import Deadline
from hypha_celery.backends import Backend, BackendError, BackendEvent, Response, TurnError
from hypha_celery.errors import AgentNotFound, Overloaded
from hypha_celery.events import payloads as ev
from hypha_celery.events.payloads import Payload, trusted
from hypha_celery.graph.llmcall import thinking_events
from hypha_celery.memory import MemoryScope
from hypha_celery.middleware import TurnEnd

log = logging.getLogger(__name__)

MAX_TURNS = 100
MAX_TASK_S = 60.0
_REASON_KIND = {"timeout": "timeout", "interrupted": "interrupted",
                "task_crashed": "task_crashed"}

#: The next step and its argument (the current turn, a notification).
Next = tuple[AgentStep, Any]


def pump(rt: AgentRuntime, name: str, incarnation: str, token: str) -> None:
    owner = Owner(rt, name, incarnation, token)
    if not owner.claim():
        return
    with owner.heartbeat():
        owner.run()


class Owner:
    def __init__(self, rt: AgentRuntime, name: str, incarnation: str, token: str) -> None:
        self.rt, self.name, self.incarnation, self.token = rt, name, incarnation, token
        self.delivery = new_token()
        self._agent: Agent | None = None
        self._doc: AgentDoc | None = None
        #: The next step, chosen in the transaction that ended the previous one (a turn
        #: costs three row transactions on the owner's side: start, seal, record).
        self._next: Next | None = None
        #: That transaction found nothing to do: the agent went idle (no step is left).
        self._idle = False

    @property
    def doc(self) -> AgentDoc:
        assert self._doc is not None, "read under the lock first"
        return self._doc

    # -- ownership -----------------------------------------------------------------
    @contextmanager
    def _locked(self, claiming: bool = False) -> Iterator[AgentTx]:
        with rows.locked(self.rt.store, self.name, self.incarnation) as atx:
            if not machine.owned_by(atx.doc, self.token, None if claiming else self.delivery):
                raise _Lost
            self._doc = atx.doc
            yield atx
            machine.release(atx.doc)

    @property
    def stale_after(self) -> float:
        """A heartbeat older than this means the owner is gone (3 lease intervals)."""
        return max(1.0, 3 * self.rt.lease_interval)

    def claim(self) -> bool:
        """Take the agent for this delivery of the pump message. Another delivery that
        owns it and still beats is alive: this one is a duplicate and quits (after at
        most ``stale_after`` seconds of looking). One that stopped beating died: a turn
        it left streaming ends ``task_crashed``."""
        deadline = time.monotonic() + self.stale_after + self.rt.lease_interval
        while True:
            try:
                taken = self._try_claim()
            except (_Lost, AgentNotFound):
                return False
            if taken:
                return True
            if time.monotonic() > deadline:
                return False  # the owner kept beating: a duplicate message
            time.sleep(min(0.25, self.stale_after / 4))

    def _try_claim(self) -> bool:
        with self._locked(claiming=True) as atx:
            crashed = machine.claim(atx.doc, self.delivery, atx.heartbeat_at,
                                    self.rt.lease_interval, self.stale_after)
            if crashed is False:
                return False  # alive, or not yet known to be dead
            atx.beat = True
            if crashed is not None:
                atx.write_control(None)
                self.rt.middleware.after_turn(effects.turn(self.name, crashed.request),
                                              TurnEnd(_elapsed_ms(crashed), "task_crashed"))
            self._then(atx)
        return True

    def heartbeat(self) -> AbstractContextManager[None]:
        """Beat the agent's heartbeat while this task owns it (the process's watch
        thread writes the heartbeats of all the agents it owns in one statement)."""
        return self.rt.watch.owning(self.name, self.incarnation)

    def run(self) -> None:
        began = time.monotonic()
        turns = 0
        while True:
            try:
                more, turned = self.step()
            except (_Lost, AgentNotFound):
                return
            if not more:
                return
            turns += turned
            limit = turns >= MAX_TURNS or time.monotonic() - began > MAX_TASK_S
            if limit and (self._next is None or self._next[0] in machine.RESUMABLE):
                self._hand_off()
                return

    def _hand_off(self) -> None:
        try:
            with self._locked() as atx:
                token = machine.hand_off(atx.doc)
                atx.after_commit(lambda: self.rt.publish(self.name, self.incarnation, token))
        except (_Lost, AgentNotFound):
            return

    # -- the loop ------------------------------------------------------------------
    def step(self) -> tuple[bool, int]:
        """One step; returns (more work may follow, turns finished)."""
        action, self._next = self._next, None
        if action is None and self._idle:
            return False, 0  # gone idle in the last transaction: no need to look again
        if action is None:
            with self._locked() as atx:
                action = self._choose(atx)
        if action is None:
            return False, 0
        step, arg = action
        if step is AgentStep.PRE_RUN:
            self._pre_run()
        elif step is AgentStep.DISPATCH:
            self._dispatch(arg)
        elif step is AgentStep.STREAM:
            self._stream_turn(*arg)
        elif step is AgentStep.DECIDE:
            self._decide(arg)
            return True, 1
        elif step is AgentStep.EVENT:
            self._event(arg)
        elif step is AgentStep.POST_RUN:
            self._post_run()
        elif step is AgentStep.STOP:
            self._terminate("normal")
            return False, 0
        return True, 0

    def _then(self, atx: AgentTx) -> None:
        """Choose the next step in this transaction."""
        self._next = self._choose(atx)
        self._idle = self._next is None

    def _choose(self, atx: AgentTx) -> Next | None:
        doc = atx.doc
        step = machine.next_step(doc)
        cur = doc.current
        if step is AgentStep.DISPATCH and not callbacks.overridden(self.agent(), "pre_turn"):
            assert cur is not None  # no pre_turn to run outside the lock: start it now
            if self._start(atx, cur, cur.request.prompt, doc.state):
                return AgentStep.STREAM, (cur, cur.request.prompt, doc.state)
            return AgentStep.DECIDE, cur
        if step is not None:
            return step, cur
        # the next notification, else (when a queued prompt would be taken next) that
        # prompt: one statement
        step = machine.after_events(doc)
        found, event, queued = atx.pop_next(step is AgentStep.TAKE and doc.self_chain is None)
        if found:
            return AgentStep.EVENT, event
        if step is AgentStep.POST_RUN:
            self._halt(atx)
            return step, None
        if step is AgentStep.STOP:
            return step, None
        if step is AgentStep.TAKE and self._take_next(atx, queued):
            return self._choose(atx)
        machine.idle(doc)
        atx.after_commit(lambda: telemetry.rich(("state", "changed"), self.name,
                                                **{"from": "processing", "to": "idle"}))
        return None

    def _take_next(self, atx: AgentTx, nxt: Request | None) -> bool:
        """Make the self-chain, else ``nxt`` (the oldest queued prompt, taken from its
        lane), current (a queued ask whose caller is gone is dropped instead); False when
        there is none."""
        if machine.take_self_chain(atx.doc):
            return True
        if nxt is None:
            return False
        if callers.is_down(atx.tx, nxt, self.rt.lease_interval):
            self._caller_down(atx, nxt)
        else:
            machine.make_current(atx.doc, nxt)
        return True

    def _caller_down(self, atx: AgentTx, request: Request) -> None:
        """Drop a queued ask whose caller is gone, unrun (GenAgent's ``caller_down``)."""
        effects.finish(atx, self.rt, request, Failed("caller_down"))
        atx.emit(ev.AgentRequestCancelled(ref=request.ref, reason="caller_down"))
        turn = effects.turn(self.name, request)
        atx.after_commit(lambda: self.rt.middleware.after_turn_cancelled(
            turn, "caller_down"))

    # -- classes ---------------------------------------------------------------------
    def agent(self) -> Agent:
        if self._agent is None:
            self._agent = self.rt.agent_class(self.doc.kind)()
        return self._agent

    # -- pre_run / events / halt -----------------------------------------------------
    def _pre_run(self) -> None:
        try:
            with acting_as(self.name):
                state = self.agent().pre_run(self.doc.state)
            callbacks.check_state(state)
        except Exception as exc:
            log.warning("agent pre_run failed: %s", type(exc).__name__)
            self._terminate("pre_run_failed")
            return
        with self._locked() as atx:
            machine.pre_run_done(atx.doc, state)
            self._then(atx)

    def _event(self, payload: Any) -> None:
        telemetry.rich(("event", "received"), self.name, event=payload)
        decision = self._contained("handle_event", payload, self.doc.state)
        refused: Overloaded | None = None
        with self._locked() as atx:
            text = machine.decided(atx.doc, decision)
            if text is not None:
                refused = self._follow_up(atx, text, Origin.EVENT)
            if refused is None:
                self._then(atx)
        if refused is not None:
            self._overloaded_prompt(refused)

    def _overloaded_prompt(self, refused: Overloaded) -> None:
        """A generated prompt that did not fit goes to ``handle_error``; a prompt it
        returns is dropped (logged), a halt applies."""
        err = TurnError("overloaded", refused.info)
        decision = self._contained("handle_error", new_token(), err, self.doc.state)
        with self._locked() as atx:
            if machine.decided(atx.doc, decision) is not None:
                log.warning("agent dropped a generated prompt: the prompt queue is full")
            self._then(atx)

    def _halt(self, atx: AgentTx) -> None:
        """GenAgent's transition_to_halted, up to ``post_run`` (run next, unlocked)."""
        for request in machine.halt(atx.doc, atx.queued()):
            atx.remove_queued(request.ref)
            effects.finish(atx, self.rt, request, Failed("halted"))
        atx.emit(ev.AgentHalted())

    def _post_run(self) -> None:
        try:
            with acting_as(self.name):
                self.agent().post_run(self.doc.state)
        except Exception as exc:
            log.warning("agent post_run raised %s", type(exc).__name__)
        telemetry.rich(("halted",), self.name)

    def _terminate(self, reason: str) -> None:
        """End the agent: fail what is left, call the cleanup callbacks, delete the row."""
        try:
            with self._locked() as atx:
                effects.terminate(atx, self.rt, reason)
        except (_Lost, AgentNotFound):
            return
        effects.cleanup(self.rt, self.doc, reason)

    # -- a turn ------------------------------------------------------------------------
    def _dispatch(self, cur: CurrentTurn) -> None:
        go = self._pre_turn(cur, self.doc.state)
        if go is None:
            return
        prompt, state = go
        with self._locked() as atx:
            now = atx.doc.current
            if now is None or not cur.same(now):
                self._then(atx)
                return
            started = self._start(atx, now, prompt, state)
            if not started:
                self._then(atx)
        if started:
            self._stream_turn(now, prompt, state)

    def _start(self, atx: AgentTx, cur: CurrentTurn, prompt: str, state: Any) -> bool:
        """Mark ``cur`` streaming (in ``atx``); False when an interrupt came first."""
        started = machine.start(atx.doc, cur, prompt, state, atx.control)
        atx.write_control(None)
        if not started:
            return False
        atx.emit(_turn_started(**_turn_ids(cur)))
        turn, original = effects.turn(self.name, cur.request), cur.request.prompt

        def emit() -> None:
            self.rt.middleware.before_turn(turn)
            telemetry.rich(("prompt", "start"), self.name, ref=turn.ref, attempt=turn.attempt,
                           prompt=prompt, original_prompt=original,
                           rewritten=prompt != original, agent_state=state)

        atx.after_commit(emit)
        return True

    def _stream_turn(self, cur: CurrentTurn, prompt: str, state: Any) -> None:
        attempt = self._stream(cur, prompt, state)
        # read before the row lock (a checkpoint takes the attempt's lock, then the row's);
        # the attempt has ended, so no checkpoint is stored after this read
        session = attempt.session_now()
        with self._locked() as atx:
            live = atx.doc.current
            if live is None or not cur.same(live) or live.stage is not Stage.STREAMING:
                atx.emit(_turn_late(**_turn_ids(cur)))
                return
            outcome = attempt.outcome
            if atx.control == cur.ref:  # an accepted interrupt wins the race
                outcome = TurnError("interrupted")
            assert outcome is not None
            atx.doc.session = session
            keeps = attempt.keeps_state and not (
                isinstance(outcome, TurnError) and outcome.reason == "interrupted")
            machine.seal(live, outcome, keeps, attempt.stream_state)
            if attempt.reasoning_chars:  # the provider's thinking, as counts only
                for payload in thinking_events(attempt.reasoning_chars):
                    atx.emit(payload)
            if attempt.context is not None:  # the skills that went into the call
                for done in attempt.context.completed():
                    atx.emit(done)
            atx.write_control(None)
            self._then(atx)
        self._turn_ended(cur, outcome, attempt.duration_ms)

    def _turn_ended(self, cur: CurrentTurn, outcome: Response | TurnError,
                    duration_ms: float) -> None:
        turn = effects.turn(self.name, cur.request)
        if isinstance(outcome, Response):
            self.rt.middleware.after_turn(turn, TurnEnd(duration_ms))
            telemetry.rich(("prompt", "stop"), self.name, ref=turn.ref, attempt=turn.attempt)
        else:
            kind = _REASON_KIND.get(outcome.reason, "backend_or_callback_error")
            self.rt.middleware.after_turn(turn, TurnEnd(duration_ms, kind))
            telemetry.rich(("prompt", "error"), self.name, ref=turn.ref, attempt=turn.attempt,
                           reason=outcome.reason)

    def _pre_turn(self, cur: CurrentTurn, state: Any) -> tuple[str, Any] | None:
        """``(prompt, state)`` to dispatch, or None when pre_turn refused the turn (then
        the refusal is already recorded). A raising ``pre_turn`` keeps ``state``."""
        agent = self.agent()
        try:
            with acting_as(self.name):
                result = agent.pre_turn(cur.request.prompt,
                                        callbacks.given(agent, "pre_turn", state))
            if isinstance(result, Prompt) and isinstance(result.text, str):
                callbacks.check_state(result.state)
                return result.text, result.state
            reason = {NoReply: "pre_turn_skipped", Halt: "pre_turn_halted"}.get(
                type(result), "pre_turn_invalid")
            new_state = result.state if reason != "pre_turn_invalid" else state
            callbacks.check_state(new_state)
        except Exception as exc:
            log.warning("agent pre_turn raised %s", type(exc).__name__)
            reason = "pre_turn_skipped" if cur.origin.external else "pre_turn_crashed"
            new_state = state
        self.rt.middleware.after_turn_rejected(effects.turn(self.name, cur.request),
                                               reason)
        with self._locked() as atx:
            live = atx.doc.current
            if live is None or not cur.same(live):
                return None
            request = machine.refuse(atx.doc, live, new_state, reason)
            if request is not None:
                effects.finish(atx, self.rt, request, Failed(reason))
            else:
                atx.write_control(None)
            self._then(atx)
        return None

    def _stream(self, cur: CurrentTurn, prompt: str, state: Any) -> Attempt:
        """Run the turn's stream on a backend instance of its own (so a late
        ``cancel`` can only reach this turn's request)."""
        stream_to, ref = cur.request.stream_to, cur.ref

        def relay(event: BackendEvent) -> None:
            publish_event(self.rt.live, self.name, ref, event)
            if stream_to is not None:
                self.rt.transport.relay(stream_to, Streamed(self.name, ref, event.to_json()))

        def save(session: dict[str, Any]) -> None:
            with self._locked() as atx:
                if cur.same(atx.doc.current):
                    atx.doc.session = session

        def watching(on_stop: Callable[[], None], deadline: Deadline | None
                     ) -> AbstractContextManager[None]:
            return self.rt.watch.turn(self.name, self.incarnation, ref, on_stop, deadline)

        backend = self.rt.new_backend(self.doc.backend, emit=self._tool_events(cur))
        attempt = Attempt(self.agent(), backend, self.name, self.doc.session, prompt, state,
                          self.doc.limits, relay,
                          persist=lambda session: self._checkpoint(cur, backend, session),
                          context=self._context(cur))
        return run_attempt(attempt, watching, save)

    def _context(self, cur: CurrentTurn) -> TurnContext | None:
        """The attempt's context build when the agent class declares one (its events go
        to the agent's log in one fenced transaction, before the backend is called)."""
        config = context_of(type(self.agent()))
        if config is None:
            return None
        scope = self.doc.memory_scope
        return TurnContext(config, f"{cur.ref}.{cur.attempt}.context",
                           self._fenced_events(cur),
                           memory=self.rt.memory_manager() if config.memory else None,
                           scope=None if scope is None else MemoryScope(**scope))

    def _fenced_events(self, cur: CurrentTurn) -> Callable[[Sequence[Payload]], None]:
        """Append payloads to the agent's log, together, while ``cur`` is still its
        turn."""
        def flush(payloads: Sequence[Payload]) -> None:
            if not payloads:
                return
            try:
                with self._locked() as atx:
                    if cur.same(atx.doc.current):
                        for payload in payloads:
                            atx.emit(payload)
            except _Lost:
                log.info("agent %s lost its turn: its context events were not written",
                         self.name)
        return flush

    def _tool_events(self, cur: CurrentTurn) -> Callable[[Payload], None]:
        """Append a governed tool call's event to the agent's stream while ``cur`` is
        still the agent's turn (a turn that lost it writes nothing)."""
        def emit(payload: Payload) -> None:
            try:
                with self._locked() as atx:
                    if cur.same(atx.doc.current):
                        atx.emit(payload)
            except _Lost:
                log.info("agent %s lost its turn: a tool event was not written", self.name)
        return emit

    def _checkpoint(self, cur: CurrentTurn, backend: Backend, session: dict[str, Any]
                    ) -> None:
        """Store the session of an acknowledged provider session id, fenced: this task
        still owns the agent and ``cur`` is still streaming, not interrupted."""
        try:
            with self._locked() as atx:
                live = atx.doc.current
                if live is None or not cur.same(live) or live.stage is not Stage.STREAMING \
                        or atx.control == cur.ref:
                    raise _Lost
                atx.doc.session = session
        except (_Lost, AgentNotFound):
            raise BackendError(backend.provider, "stale_checkpoint", False,
                               message="the turn no longer owns the agent") from None

    def _decide(self, cur: CurrentTurn) -> None:
        sealed = machine.sealed(cur)
        outcome = sealed.outcome.decode()
        state = sealed.stream_state if sealed.keeps else self.doc.state
        agent = self.agent()
        if isinstance(outcome, Response):
            decision = callbacks.decision(self.name, agent, "handle_response", cur.ref,
                                          outcome, state)
            if decision is None:
                self._terminate("callback_failed")
                return
        else:
            decision = self._contained("handle_error", cur.ref, outcome, state)
        after = callbacks.post_turn(self.name, agent, outcome, cur.ref, decision.state)
        self._record(cur, decision, after)

    def _record(self, cur: CurrentTurn, decision: AgentDecision, state: Any) -> None:
        refused: Overloaded | None = None
        with self._locked() as atx:
            live = atx.doc.current
            if live is not None and cur.same(live):
                outcome = machine.sealed(cur).outcome
                if isinstance(outcome, Failed):
                    atx.emit(_turn_failed(**_turn_ids(cur), reason=outcome.reason))
                    ended: tuple[str, str | None] = ("failed", outcome.reason)
                else:
                    atx.emit(_turn_completed(**_turn_ids(cur)))
                    ended = ("completed", None)
                atx.after_commit(lambda: publish_end(self.rt.live, self.name, cur.ref,
                                                     *ended))
                done = machine.record(atx.doc, cur, decision, state)
                refused = self._recorded(atx, cur, done)
            if refused is None:
                self._then(atx)
        if refused is not None:
            self._overloaded_prompt(refused)

    def _recorded(self, atx: AgentTx, cur: CurrentTurn,
                  done: machine.Recorded) -> Overloaded | None:
        if done.outcome is not None:
            effects.finish(atx, self.rt, cur.request, done.outcome)
        if done.follow_up is not None:
            return self._follow_up(atx, done.follow_up, Origin.SELF_CHAIN)
        return None

    def _follow_up(self, atx: AgentTx, text: str, origin: Origin) -> Overloaded | None:
        """Queue a generated prompt: a follow-up takes the self-chain slot (outside the
        count, inside the bytes), an event's prompt joins the FIFO. Returns the overload
        when it does not fit."""
        request = machine.new_request(text, origin)
        bound = atx.doc.limits.prompts
        if origin is Origin.SELF_CHAIN and atx.doc.self_chain is None:
            lane = lanes.lock(atx.tx, rows.prompts_lane(self.incarnation))
            if lane.pending_bytes + request.bytes > bound.max_bytes:
                return rows.overloaded(lanes.overload(
                    "self_chain", lane, request.bytes,
                    lanes.Bound(bound.max_count + 1, bound.max_bytes)))
            machine.chain(atx.doc, request)
            return None
        return atx.queue(request, bound)

    def _contained(self, callback: str, *args: Any) -> AgentDecision:
        return callbacks.contained(self.name, self.agent(), callback, *args)


class _Lost(Exception):
    """This task no longer owns the agent (its token was replaced)."""


class _TurnIds(TypedDict):
    """What every ``agent.turn.*`` event says: the turn's request, attempt and origin."""

    ref: str
    attempt: int
    origin: str


def _turn_ids(cur: CurrentTurn) -> _TurnIds:
    return {"ref": cur.ref, "attempt": cur.attempt, "origin": cur.origin.value}


# A turn's events, built unvalidated (every turn writes two: see trusted).
_turn_started = trusted(ev.AgentTurnStarted)
_turn_completed = trusted(ev.AgentTurnCompleted)
_turn_failed = trusted(ev.AgentTurnFailed)
_turn_late = trusted(ev.AgentTurnLateResult)


def _elapsed_ms(cur: CurrentTurn) -> float:
    started = cur.started_at
    return 0.0 if started is None else max(0.0, (time.time() - started) * 1000.0)


__all__ = ["MAX_TASK_S", "MAX_TURNS", "Owner", "pump"]
