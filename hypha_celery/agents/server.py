"""The owner of an agent for the moment: the ``hypha.agent.pump`` task's body.

An agent is idle (no task, no memory anywhere) until an input arrives; the caller that
finds it idle sets ``doc["pump"]`` to a fresh token and publishes one pump message. The
worker that takes it owns the agent until the mailbox is empty, doing one *step* at a time,
each chosen under the agent's row lock (GenAgent's ``process_next``):

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
``MAX_TURNS`` turns or ``MAX_TASK_S`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from hypha_celery import lanes
from hypha_celery.agents import callers, rows, telemetry
from hypha_celery.agents.behaviour import Agent, Decision, Halt, NoReply, Prompt, acting_as
from hypha_celery.agents.options import Limits
from hypha_celery.agents.rows import AgentTx, Doc, notifications_lane, prompts_lane
from hypha_celery.agents.runtime import AgentRuntime, new_token, ref_channel
from hypha_celery.agents.stream import Attempt, run_attempt
from hypha_celery.backends import Backend, Event, Response, TurnError
from hypha_celery.errors import AgentNotFound
from hypha_celery.graph.jsonsafe import is_json

log = logging.getLogger(__name__)

MAX_TURNS = 100
MAX_TASK_S = 60.0
EXTERNAL = ("ask", "tell")
#: Next steps whose choice left nothing only this task knows (a started stream, a popped
#: notification, an applied halt): a fresh message may take over before them.
_RESUMABLE = frozenset({"pre_run", "dispatch", "decide", "stop"})
_REASON_KIND = {"timeout": "timeout", "interrupted": "interrupted",
                "task_crashed": "task_crashed"}


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
        self._backend: Backend | None = None
        self._doc: Doc = {}
        #: The next step, chosen in the transaction that ended the previous one (a turn
        #: costs three row transactions on the owner's side: start, seal, record).
        self._next: tuple[str, Any] | None = None

    # -- ownership -----------------------------------------------------------------
    @contextmanager
    def _locked(self, claiming: bool = False) -> Iterator[AgentTx]:
        with rows.locked(self.rt.store, self.name, self.incarnation) as atx:
            if atx.doc.get("pump") != self.token:
                raise _Lost
            if not claiming and atx.doc.get("owner") != self.delivery:
                raise _Lost
            self._doc = atx.doc
            yield atx
            if atx.doc.get("pump") is None:
                atx.doc["owner"] = None
            self._doc = atx.doc

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
            if taken is not None:
                return taken
            if time.monotonic() > deadline:
                return False  # the owner kept beating: a duplicate message
            time.sleep(min(0.25, self.stale_after / 4))

    def _try_claim(self) -> bool | None:
        with self._locked(claiming=True) as atx:
            owner = atx.doc.get("owner")
            beat = atx.heartbeat_at
            if owner not in (None, self.delivery) and self.rt.lease_interval > 0 and \
                    beat is not None and time.time() - beat < self.stale_after:
                return None  # alive, or not yet known to be dead
            atx.doc["owner"] = self.delivery
            atx.beat = True
            cur = atx.doc.get("current")
            if owner is not None and cur is not None and cur.get("stage") == "streaming":
                self._seal(atx, cur, TurnError("task_crashed", {"exception": "WorkerLost"}),
                           keeps=False, stream_state=None)
                telemetry.turn("error", self.name, cur["ref"], cur["attempt"],
                               cur["origin"], duration_ms=_elapsed_ms(cur),
                               reason_kind="task_crashed")
            self._then(atx)
        return True

    @contextmanager
    def heartbeat(self) -> Iterator[None]:
        stop = threading.Event()
        interval = self.rt.lease_interval

        def beat() -> None:
            while not stop.wait(interval):
                with suppress(Exception):
                    rows.heartbeat(self.rt.store, self.name, self.incarnation)

        thread = threading.Thread(target=beat, name="hypha-agent-heartbeat", daemon=True)
        if interval > 0:
            thread.start()
        try:
            yield
        finally:
            stop.set()

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
            if limit and (self._next is None or self._next[0] in _RESUMABLE):
                self._hand_off()
                return

    def _hand_off(self) -> None:
        try:
            with self._locked() as atx:
                token = new_token()
                atx.doc["pump"], atx.doc["owner"] = token, None
                atx.after_commit(lambda: self.rt.publish(self.name, self.incarnation, token))
        except (_Lost, AgentNotFound):
            return

    # -- the loop ------------------------------------------------------------------
    def step(self) -> tuple[bool, int]:
        """One step; returns (more work may follow, turns finished)."""
        action, self._next = self._next, None
        if action is None:
            with self._locked() as atx:
                action = self._choose(atx)
        if action is None:
            return False, 0
        kind, arg = action
        if kind == "pre_run":
            self._pre_run()
        elif kind == "dispatch":
            self._dispatch(arg)
        elif kind == "stream":
            self._stream_turn(*arg)
        elif kind == "decide":
            self._decide(arg)
            return True, 1
        elif kind == "event":
            self._event(arg)
        elif kind == "post_run":
            self._post_run()
        elif kind == "stop":
            self._stop()
            return False, 0
        return True, 0

    def _then(self, atx: AgentTx) -> None:
        """Choose the next step in this transaction."""
        self._next = self._choose(atx)

    def _choose(self, atx: AgentTx) -> tuple[str, Any] | None:
        doc = atx.doc
        if doc.get("pre_run"):
            return "pre_run", None
        cur = doc.get("current")
        if cur is not None:
            if cur["stage"] != "queued":
                return "decide", cur
            if type(self.agent()).pre_turn is not Agent.pre_turn:
                return "dispatch", cur  # pre_turn runs outside the lock first
            if self._start(atx, cur, cur["prompt"], doc["state"]):
                return "stream", (cur, cur["prompt"], doc["state"])
            return "decide", cur
        item = lanes.pop(atx.tx, notifications_lane(self.incarnation))
        if item is not None:
            return "event", item.payload
        if doc.get("halting") or doc.get("halt_pending"):
            self._halt(atx)
            return "post_run", None
        if doc.get("draining"):
            return "stop", None
        if not doc.get("halted") and self._take_next(atx):
            return self._choose(atx)
        doc["pump"] = None
        atx.after_commit(lambda: telemetry.rich(("state", "changed"), self.name,
                                                **{"from": "processing", "to": "idle"}))
        return None

    def _take_next(self, atx: AgentTx) -> bool:
        """Make the self-chain, else the oldest queued prompt, current (a queued ask whose
        caller is gone is dropped instead); False when there is none."""
        doc = atx.doc
        if doc.get("self_chain") is not None:
            doc["current"], doc["self_chain"] = {**doc["self_chain"], "stage": "queued"}, None
            return True
        nxt = lanes.pop(atx.tx, prompts_lane(self.incarnation))
        if nxt is None:
            return False
        if callers.is_down(atx.tx, nxt.payload, self.rt.lease_interval):
            self._caller_down(atx, nxt.payload)
        else:
            doc["current"] = {**nxt.payload, "stage": "queued"}
        return True

    def _caller_down(self, atx: AgentTx, item: dict[str, Any]) -> None:
        """Drop a queued ask whose caller is gone, unrun (GenAgent's ``caller_down``)."""
        finish_request(atx, item, {"error": "caller_down", "info": {}}, self.limits(), self.rt)
        atx.event("agent.request.cancelled", {"ref": item["ref"], "reason": "caller_down"})
        ref, attempt, origin = item["ref"], item["attempt"], item["origin"]
        atx.after_commit(lambda: telemetry.turn("cancelled", self.name, ref, attempt, origin,
                                                reason_kind="caller_down"))

    # -- classes ---------------------------------------------------------------------
    def agent(self) -> Agent:
        if self._agent is None:
            self._agent = self.rt.agent_class(self._doc["kind"])()
        return self._agent

    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.rt.backend_class(self._doc["backend"])()
        return self._backend

    def limits(self) -> Limits:
        return Limits(**self._doc["limits"])

    # -- pre_run / events / halt -----------------------------------------------------
    def _pre_run(self) -> None:
        try:
            with acting_as(self.name):
                state = self.agent().pre_run(self._doc["state"])
            _check_state(state)
        except Exception as exc:
            log.warning("agent pre_run failed: %s", type(exc).__name__)
            self._terminate("pre_run_failed")
            return
        with self._locked() as atx:
            atx.doc["state"], atx.doc["pre_run"] = state, False
            self._then(atx)

    def _event(self, payload: Any) -> None:
        state = self._doc["state"]
        telemetry.rich(("event", "received"), self.name, event=payload)
        decision = self._contained("handle_event", payload, state)
        refused: dict[str, Any] | None = None
        with self._locked() as atx:
            atx.doc["state"] = decision.state
            if isinstance(decision, Halt):
                atx.doc["halting"] = True
            elif isinstance(decision, Prompt):
                refused = self._follow_up(atx, decision.text, "event")
            if refused is None:
                self._then(atx)
        if refused is not None:
            self._overloaded_prompt(refused)

    def _overloaded_prompt(self, info: dict[str, Any]) -> None:
        """A generated prompt that did not fit goes to ``handle_error``; a prompt it
        returns is dropped (logged), a halt applies."""
        err = TurnError("overloaded", info)
        decision = self._contained("handle_error", new_token(), err, self._doc["state"])
        with self._locked() as atx:
            atx.doc["state"] = decision.state
            if isinstance(decision, Halt):
                atx.doc["halting"] = True
            elif isinstance(decision, Prompt):
                log.warning("agent dropped a generated prompt: the prompt queue is full")
            self._then(atx)

    def _halt(self, atx: AgentTx) -> None:
        """GenAgent's transition_to_halted, up to ``post_run`` (run next, unlocked)."""
        doc = atx.doc
        doc.update(halted=True, halting=False, halt_pending=False)
        lane = prompts_lane(self.incarnation)
        for item in lanes.items(atx.tx, lane):
            if item.payload.get("on_halt") == "fail":
                lanes.remove(atx.tx, lane, item.ref)
                self._finish_request(atx, item.payload, _error_outcome("halted"))
        atx.event("agent.halted")

    def _post_run(self) -> None:
        try:
            with acting_as(self.name):
                self.agent().post_run(self._doc["state"])
        except Exception as exc:
            log.warning("agent post_run raised %s", type(exc).__name__)
        telemetry.rich(("halted",), self.name)

    def _stop(self) -> None:
        self._terminate("normal")

    def _terminate(self, reason: str) -> None:
        """End the agent: fail what is left, call the cleanup callbacks, delete the row."""
        try:
            with self._locked() as atx:
                finish_all(atx, "agent_terminated" if reason != "normal" else "draining",
                           self.rt, {"reason": reason} if reason != "normal" else None)
                atx.event("agent.stopped", {"reason": reason})
                atx.delete()
        except (_Lost, AgentNotFound):
            return
        cleanup(self.rt, self._doc, reason)

    # -- a turn ------------------------------------------------------------------------
    def _dispatch(self, cur: dict[str, Any]) -> None:
        state = self._doc["state"]
        go = self._pre_turn(cur, state)
        if go is None:
            return
        prompt, state = go
        with self._locked() as atx:
            now = atx.doc["current"]
            if not _same(now, cur):
                self._then(atx)
                return
            started = self._start(atx, now, prompt, state)
            if not started:
                self._then(atx)
        if started:
            self._stream_turn(now, prompt, state)

    def _start(self, atx: AgentTx, cur: dict[str, Any], prompt: str, state: Any) -> bool:
        """Mark ``cur`` streaming (in ``atx``); False when an interrupt came first."""
        if atx.control == cur["ref"]:
            self._seal(atx, cur, TurnError("interrupted"), keeps=False, stream_state=None)
            return False
        cur.update(stage="streaming", sent=prompt, started_at=time.time())
        atx.doc["state"] = state
        atx.write_control(None)
        atx.event("agent.turn.started", _turn_data(cur))
        ref, n, origin, original = cur["ref"], cur["attempt"], cur["origin"], cur["prompt"]

        def emit() -> None:
            telemetry.turn("start", self.name, ref, n, origin)
            telemetry.rich(("prompt", "start"), self.name, ref=ref, attempt=n, prompt=prompt,
                           original_prompt=original, rewritten=prompt != original,
                           agent_state=state)

        atx.after_commit(emit)
        return True

    def _stream_turn(self, cur: dict[str, Any], prompt: str, state: Any) -> None:
        attempt = self._stream(cur, prompt, state)
        with self._locked() as atx:
            live = atx.doc["current"]
            if not _same(live, cur) or live.get("stage") != "streaming":
                atx.event("agent.turn.late_result", _turn_data(cur))
                return
            outcome = attempt.outcome
            if atx.control == cur["ref"]:  # an accepted interrupt wins the race
                outcome = TurnError("interrupted")
            assert outcome is not None
            atx.doc["session"] = attempt.session
            keeps = attempt.keeps_state and not (
                isinstance(outcome, TurnError) and outcome.reason == "interrupted")
            self._seal(atx, live, outcome, keeps=keeps, stream_state=attempt.stream_state)
            self._then(atx)
        self._turn_ended(cur, outcome, attempt.duration_ms)

    def _turn_ended(self, cur: dict[str, Any], outcome: Response | TurnError,
                    duration_ms: float) -> None:
        ref, n, origin = cur["ref"], cur["attempt"], cur["origin"]
        if isinstance(outcome, Response):
            telemetry.turn("stop", self.name, ref, n, origin, duration_ms=duration_ms)
            telemetry.rich(("prompt", "stop"), self.name, ref=ref, attempt=n)
        else:
            kind = _REASON_KIND.get(outcome.reason, "backend_or_callback_error")
            telemetry.turn("error", self.name, ref, n, origin, duration_ms=duration_ms,
                           reason_kind=kind)
            telemetry.rich(("prompt", "error"), self.name, ref=ref, attempt=n,
                           reason=outcome.reason)

    def _pre_turn(self, cur: dict[str, Any], state: Any) -> tuple[str, Any] | None:
        """``(prompt, state)`` to dispatch, or None when pre_turn refused the turn (then
        the refusal is already recorded)."""
        try:
            with acting_as(self.name):
                result = self.agent().pre_turn(cur["prompt"], state)
            if isinstance(result, Prompt) and isinstance(result.text, str):
                _check_state(result.state)
                return result.text, result.state
            reason = {NoReply: "pre_turn_skipped", Halt: "pre_turn_halted"}.get(
                type(result), "pre_turn_invalid")
            new_state = result.state if reason != "pre_turn_invalid" else state
            _check_state(new_state)
        except Exception as exc:
            log.warning("agent pre_turn raised %s", type(exc).__name__)
            reason, new_state = ("pre_turn_skipped" if cur["origin"] in EXTERNAL
                                 else "pre_turn_crashed"), state
        telemetry.turn("rejected", self.name, cur["ref"], cur["attempt"], cur["origin"],
                       reason_kind=reason)
        with self._locked() as atx:
            if not _same(atx.doc["current"], cur):
                return None
            atx.doc["state"] = new_state
            if reason == "pre_turn_halted":
                atx.doc["halting"] = True
            if cur["origin"] in EXTERNAL:
                self._finish_request(atx, cur, _error_outcome(reason))
                atx.doc["current"] = None
            else:  # a generated prompt's refusal goes to handle_error
                self._seal(atx, atx.doc["current"], TurnError(reason), keeps=False,
                           stream_state=None)
            self._then(atx)
        return None

    def _stream(self, cur: dict[str, Any], prompt: str, state: Any) -> Attempt:
        stream_to = cur.get("stream_to")
        ref = cur["ref"]

        def relay(event: Event) -> None:
            self.rt.transport.relay(stream_to, {"type": "event", "agent": self.name,
                                                "ref": ref, "event": event.to_json()})

        def interrupted() -> bool:
            alive, control = rows.control(self.rt.store, self.name, self.incarnation)
            return not alive or control == ref

        def save(session: dict[str, Any]) -> None:
            with self._locked() as atx:
                if _same(atx.doc["current"], cur):
                    atx.doc["session"] = session

        attempt = Attempt(self.agent(), self.backend(), self.name, self._doc["session"],
                          prompt, state, self.limits(), relay)
        return run_attempt(attempt, interrupted, save)

    def _seal(self, atx: AgentTx, cur: dict[str, Any], outcome: Response | TurnError, *,
              keeps: bool, stream_state: Any) -> None:
        cur["stage"] = "deciding"
        cur["sealed"] = _outcome_json(outcome)
        cur["stream_state"] = stream_state if keeps and is_json(stream_state) else None
        cur["keeps"] = keeps and is_json(stream_state)
        atx.write_control(None)

    def _decide(self, cur: dict[str, Any]) -> None:
        outcome = _outcome_from(cur["sealed"])
        state = cur["stream_state"] if cur.get("keeps") else self._doc["state"]
        ref = cur["ref"]
        if isinstance(outcome, Response):
            decision = self._decision("handle_response", ref, outcome, state)
            if decision is None:
                self._terminate("callback_failed")
                return
        else:
            decision = self._contained("handle_error", ref, outcome, state)
        try:
            with acting_as(self.name):
                after = self.agent().post_turn(outcome, ref, decision.state)
            _check_state(after)
        except Exception as exc:
            log.warning("agent post_turn raised %s", type(exc).__name__)
            after = decision.state
        self._record(cur, outcome, decision, after)

    def _record(self, cur: dict[str, Any], outcome: Response | TurnError, decision: Decision,
                state: Any) -> None:
        refused: dict[str, Any] | None = None
        with self._locked() as atx:
            doc = atx.doc
            if _same(doc["current"], cur):
                doc["state"], doc["current"] = state, None
                reason = outcome.reason if isinstance(outcome, TurnError) else None
                atx.event("agent.turn.failed" if reason else "agent.turn.completed",
                          {**_turn_data(cur), **({"reason": reason} if reason else {})})
                if (reason is not None and isinstance(decision, Prompt)
                        and cur["origin"] in EXTERNAL and reason != "interrupted"):
                    doc["self_chain"] = {**_request(cur), "attempt": cur["attempt"] + 1,
                                         "prompt": decision.text}  # caller-owned retry
                else:
                    refused = self._outcome(atx, cur, decision)
            if refused is None:
                self._then(atx)
        if refused is not None:
            self._overloaded_prompt(refused)

    def _outcome(self, atx: AgentTx, cur: dict[str, Any],
                 decision: Decision) -> dict[str, Any] | None:
        self._finish_request(atx, cur, cur["sealed"])
        if isinstance(decision, Prompt):
            return self._follow_up(atx, decision.text, "self_chain")
        if isinstance(decision, Halt):
            atx.doc["halting"] = True
        return None

    def _follow_up(self, atx: AgentTx, text: str, origin: str) -> dict[str, Any] | None:
        """Queue a generated prompt: a follow-up takes the self-chain slot (outside the
        count, inside the bytes), an event's prompt joins the FIFO. Returns the overload
        info when it does not fit."""
        item = new_item(text, origin)
        lane = prompts_lane(self.incarnation)
        bound = self.limits().prompts
        if origin == "self_chain" and atx.doc.get("self_chain") is None:
            state = lanes.lock(atx.tx, lane)
            if state.pending_bytes + item["bytes"] > bound.max_bytes:
                return lanes.overload("self_chain", state, item["bytes"],
                                      lanes.Bound(bound.max_count + 1, bound.max_bytes))
            atx.doc["self_chain"] = item
            return None
        return lanes.push(atx.tx, lane, item["ref"], item["bytes"], item, bound=bound)

    def _finish_request(self, atx: AgentTx, item: dict[str, Any],
                        outcome: dict[str, Any]) -> None:
        finish_request(atx, item, outcome, self.limits(), self.rt)

    # -- callback wrappers ----------------------------------------------------------------
    def _decision(self, callback: str, *args: Any) -> Decision | None:
        """A decision callback's result, or None when it raised or returned a malformed
        value (logged with the exception type only)."""
        try:
            with acting_as(self.name):
                decision = getattr(self.agent(), callback)(*args)
            if not isinstance(decision, NoReply | Prompt | Halt):
                raise TypeError(f"{callback} returned {type(decision).__name__}")
            if isinstance(decision, Prompt) and not isinstance(decision.text, str):
                raise TypeError(f"{callback} returned a Prompt whose text is not a string")
            _check_state(decision.state)
            return decision
        except Exception as exc:
            log.warning("agent %s failed: %s", callback, type(exc).__name__)
            return None

    def _contained(self, callback: str, *args: Any) -> Decision:
        """Like :meth:`_decision`, but a failure keeps the previous state (the last
        argument)."""
        decision = self._decision(callback, *args)
        return NoReply(args[-1]) if decision is None else decision


class _Lost(Exception):
    """This task no longer owns the agent (its token was replaced)."""


# -- shared with the client ------------------------------------------------------------
def new_item(prompt: str, origin: str, **extra: Any) -> dict[str, Any]:
    return {"ref": new_token(), "origin": origin, "prompt": prompt, "attempt": 1,
            "bytes": lanes.json_size(prompt), "completion": None, "stream_to": None,
            "on_halt": "queue", **extra}


def finish_request(atx: AgentTx, item: dict[str, Any], outcome: dict[str, Any],
                   limits: Limits, rt: AgentRuntime) -> None:
    """Record the one outcome of a request: the ask's answer, the tell's cached result
    (bounded), the completion (through the outbox, sent after commit)."""
    ref, origin = item["ref"], item["origin"]
    if origin == "ask":
        rows.put_result(atx.tx, atx.incarnation, ref, outcome, 0, 0, 0, internal=True)
    elif origin == "tell":
        nbytes = lanes.json_size({"ref": ref, "outcome": outcome})
        rows.put_result(atx.tx, atx.incarnation, ref, outcome, nbytes,
                        limits.max_tell_results, limits.max_tell_result_bytes)
    if origin in EXTERNAL:
        atx.after_commit(lambda: rt.notifier.publish(ref_channel(ref)))
    if item.get("completion"):
        message = {"type": "completion", "agent": atx.name, "ref": ref, "outcome": outcome}
        box = rows.outbox(atx.tx, atx.incarnation, ref, item["completion"], message)
        atx.after_commit(lambda: send(rt, box, item["completion"], message))


def send(rt: AgentRuntime, box: int, tgt: dict[str, Any], message: dict[str, Any]) -> None:
    try:
        rt.transport.deliver(tgt, message)
    except Exception as exc:  # left in the outbox: the supervisor sends it later
        log.warning("agent completion delivery failed: %s", type(exc).__name__)
        return
    rows.sent(rt.store, box)


def finish_all(atx: AgentTx, reason: str, rt: AgentRuntime,
               info: dict[str, Any] | None = None) -> None:
    """End every request of the agent with ``reason`` (a failed callback or a finished
    drain)."""
    doc = atx.doc
    limits = Limits(**doc["limits"])
    pending = [doc.get("current"), doc.get("self_chain")]
    pending += [i.payload for i in lanes.clear(atx.tx, prompts_lane(atx.incarnation))]
    for item in pending:
        if item is not None:
            finish_request(atx, item, _error_outcome(reason, info), limits, rt)
    doc["current"] = doc["self_chain"] = None
    lanes.drop(atx.tx, prompts_lane(atx.incarnation))
    lanes.drop(atx.tx, notifications_lane(atx.incarnation))


def cleanup(rt: AgentRuntime, doc: Doc, reason: str) -> None:
    """``terminate_agent`` then the backend's ``terminate_session``; failures logged."""
    try:
        with acting_as(doc["name"]):
            rt.agent_class(doc["kind"])().terminate_agent(reason, doc["state"])
    except Exception as exc:
        log.warning("agent terminate_agent raised %s", type(exc).__name__)
    try:
        rt.backend_class(doc["backend"])().terminate_session(doc["session"])
    except Exception as exc:
        log.warning("agent terminate_session raised %s", type(exc).__name__)
    telemetry.rich(("terminated",), doc["name"], reason=reason)


def _request(cur: dict[str, Any]) -> dict[str, Any]:
    keep = ("ref", "origin", "prompt", "attempt", "bytes", "completion", "stream_to",
            "on_halt")
    return {k: cur.get(k) for k in keep}


def _same(now: dict[str, Any] | None, cur: dict[str, Any]) -> bool:
    return now is not None and now["ref"] == cur["ref"] and now["attempt"] == cur["attempt"]


def _turn_data(cur: dict[str, Any]) -> dict[str, Any]:
    return {"ref": cur["ref"], "attempt": cur["attempt"], "origin": cur["origin"]}


def _elapsed_ms(cur: dict[str, Any]) -> float:
    started = cur.get("started_at")
    return 0.0 if started is None else max(0.0, (time.time() - started) * 1000.0)


def _error_outcome(reason: str, info: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": reason, "info": info or {}}


def _outcome_json(outcome: Response | TurnError) -> dict[str, Any]:
    if isinstance(outcome, Response):
        return {"ok": outcome.to_json()}
    return {"error": outcome.reason, "info": outcome.info,
            "terminal": None if outcome.terminal is None else outcome.terminal.to_json()}


def _outcome_from(doc: dict[str, Any]) -> Response | TurnError:
    if "ok" in doc:
        return Response.from_json(doc["ok"])
    terminal = doc.get("terminal")
    return TurnError(doc["error"], doc.get("info") or {},
                     None if terminal is None else Event.from_json(terminal))


def _check_state(state: Any) -> None:
    if not is_json(state):
        raise TypeError("agent state must be JSON-serializable")
