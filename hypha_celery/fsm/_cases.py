"""The recovery-case steps of a workflow decision (:class:`~.policy.WorkflowPolicy`).

A failure of the node of a state that declares ``recovery`` opens a case
(``recovery.case.opened``); each cycle (``recovery.case.attempted``) goes through
``Recovering`` into the state the strategy names: ``retry`` re-enters the failing state
and runs its node, ``fallback`` enters the state's ``fallback``, ``degrade`` re-enters
the failing state and runs its ``degrade`` node. The next success ends the case
``resolved`` (a retry) or ``degraded`` (a fallback or a degrade); an invariant violation
holds the run in ``Quarantined`` for a person; otherwise the case escalates to
``HumanReview`` — after ``Compensating`` the committed effects of earlier states that
declare a ``compensate`` node, most recent first, each exactly once. An approval resumes
the failing state, a rejection fails the run.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from hypha_celery.events import payloads as ev
from hypha_celery.events.cases import fold_case
from hypha_celery.events.status import CaseStatus
from hypha_celery.events.view import CaseDoc
from hypha_celery.fsm.machine import Fsm
from hypha_celery.fsm.recovery import Failure, Plan, RecoveryAction, plan
from hypha_celery.fsm.spec import RECOVERY_STATES
from hypha_celery.graph import Context, ErrorInfo, Next, Outcome, Review
from hypha_celery.graph.decisions import Decision

if TYPE_CHECKING:
    from hypha_celery.fsm.spec import StateRecovery


#: The fields of a case event a span event carries (ids, hashes, statuses, reasons: never
#: an error message or run content).
_TRACED = ("case_id", "state", "node", "strategy", "attempt", "cycle", "target", "evidence",
           "fingerprint", "progress", "reason", "status", "compensates", "cycles")


def span_event(payload: ev.Payload) -> None:
    """The case event as an event of the current span (the coordinator step's, under
    :class:`~hypha_celery.tracing.TracingMiddleware`); nothing without OpenTelemetry or
    a recording span."""
    try:
        from opentelemetry import trace
    except ImportError:  # the tracing extra is not installed: nothing to add to
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    data = payload.dump()
    span.add_event(payload.kind, {f"hypha.{k}": data[k] for k in _TRACED
                                  if isinstance(data.get(k), str | int | float | bool)})


#: Envelope states a run passes on a failure (a move through one is not a commit).
_FAILURE_STATES = frozenset(RECOVERY_STATES) - {"HumanReview"}


def committed(path: list[str]) -> list[str]:
    """The work states of ``path`` whose node committed: the run moved on from them to
    another work state by a transition (maybe through a review), not through a failure
    (``Recovering``, ``Compensating``, ``Quarantined``, ...)."""
    out: list[str] = []
    for i, state in enumerate(path):
        if state in RECOVERY_STATES:
            continue
        for nxt in path[i + 1:]:
            if nxt in _FAILURE_STATES:
                break
            if nxt != "HumanReview":
                if nxt != state:
                    out.append(state)
                break
    return out


def open_case(ctx: Context) -> CaseDoc | None:
    """The run's case still open (or compensating), if any."""
    case = ctx.fsm.get("case") if ctx.fsm is not None else None
    return case if case is not None and not CaseStatus(case["status"]).ended else None


class CaseSteps:
    """What a decision does about a recovery case (mixed into the walk)."""

    fsm: Fsm
    ctx: Context
    state: str

    def _accept(self, target: str, guard: str | None) -> None:
        raise NotImplementedError

    def _settle(self) -> Decision:
        raise NotImplementedError

    # -- entry points -----------------------------------------------------------------
    def recovers(self, case: CaseDoc | None) -> bool:
        """A failure now belongs to a case: one is open, or the state declares one."""
        return case is not None or self.fsm.states[self.state].recovery is not None

    def recover(self, case: CaseDoc | None, last: Outcome) -> Decision:
        """The next cycle of ``case`` (opened now if None) after ``last`` failed."""
        error = last.error or ErrorInfo(type="NodeFailed", message="no error recorded")
        failure = Failure(self.state, last.node_id, error)
        progress = case is None or failure.evidence != case["evidence"]
        if case is None:
            case = self._open(failure)
        rec = self._policy(case)
        step = plan(case, rec, failure, self._now(), progress)
        if step.action == RecoveryAction.QUARANTINE:
            return self._quarantine(case, failure, step.reason)
        if step.action == RecoveryAction.ESCALATE:
            return self.escalate(case, step.reason)
        return self._attempt(case, failure, step, progress)

    def resolve(self, case: CaseDoc) -> None:
        """The node run by the case's strategy succeeded: the case ends."""
        strategy = case["strategy"] or RecoveryAction.RETRY.value
        self._record(case, ev.RecoveryCaseResolved(
            case_id=case["case_id"], workflow=self.fsm.id, state=case["state"],
            status="resolved" if strategy == RecoveryAction.RETRY else "degraded",
            strategy=strategy, cycles=case["cycles"]))

    def compensation_done(self, case: CaseDoc, last: Outcome) -> Decision:
        """In ``Compensating``, the compensation node ran: the next, or escalate."""
        state, node = case["compensating"] or "", last.node_id
        if not last.ok:  # a compensation that raised: recorded, classified, escalated
            error = last.error.to_json() if last.error is not None else None
            return self._escalated(case, "compensation_failed", error)
        case = self._record(case, ev.RecoveryCaseCompensated(
            case_id=case["case_id"], workflow=self.fsm.id, state=case["state"], node=node,
            compensates=state))
        return self.escalate(case, case["reason"] or "escalated")

    def escalate(self, case: CaseDoc, reason: str) -> Decision:
        """Compensate what is pending, then hand the case to a person."""
        pending = self._pending(case)
        if pending:
            return self._compensate(case, pending[0], reason)
        return self._escalated(case, reason, None)

    # -- cycles -----------------------------------------------------------------------
    def _open(self, failure: Failure) -> CaseDoc:
        rec = self.fsm.states[self.state].recovery
        assert rec is not None
        n = int(self.ctx.fsm.get("cases") or 0) + 1 if self.ctx.fsm is not None else 1
        opened = ev.RecoveryCaseOpened(
            case_id=f"{self.ctx.run_id}:case:{n}", workflow=self.fsm.id, state=self.state,
            node=failure.node, fingerprint=failure.fingerprint, evidence=failure.evidence,
            error=failure.error.to_json(), at=self._now(),
            strategies=[s.value for s in rec.strategies], max_cycles=rec.max_cycles,
            max_no_progress_cycles=rec.max_no_progress_cycles,
            max_same_strategy=rec.max_same_strategy, max_elapsed=rec.max_elapsed)
        return self._record(None, opened)

    def _now(self) -> float:
        """The decision's clock: when its newest event was recorded (the same when the run
        is re-executed)."""
        return self.ctx.now if self.ctx.now is not None else time.time()

    def _policy(self, case: CaseDoc) -> StateRecovery:
        rec = self.fsm.states[case["state"]].recovery
        assert rec is not None  # a case opens only in a state that declares one
        return rec

    def _attempt(self, case: CaseDoc, failure: Failure, step: Plan, progress: bool
                 ) -> Decision:
        spec = self.fsm.states[case["state"]]
        target = spec.fallback if step.action == RecoveryAction.FALLBACK else case["state"]
        assert target is not None
        node = spec.degrade if step.action == RecoveryAction.DEGRADE else \
            self.fsm.states[target].node
        self._record(case, ev.RecoveryCaseAttempted(
            case_id=case["case_id"], workflow=self.fsm.id, state=case["state"],
            cycle=case["cycles"] + 1, strategy=step.action.value, attempt=step.attempt,
            target=target, node=node or "", fingerprint=failure.fingerprint,
            evidence=failure.evidence, progress=progress, reason=step.reason))
        self._accept("Recovering", None)
        self._accept(target, None)
        if node is not None:
            return Next(node, self.ctx.input)
        return self._settle()

    def _quarantine(self, case: CaseDoc, failure: Failure, reason: str) -> Decision:
        case = self._record(case, ev.RecoveryCaseQuarantined(
            case_id=case["case_id"], workflow=self.fsm.id, state=case["state"],
            reason=reason, evidence=failure.evidence))
        subject = self._subject(case, reason)
        self._accept("Quarantined", None)
        return Review(f"recovery case quarantined: {reason}", subject,
                      self._policy(case).review_expires_in)

    # -- compensation and escalation ---------------------------------------------------
    def _pending(self, case: CaseDoc) -> list[str]:
        """Earlier states of the path whose committed effect has a compensation not yet
        run (in this case, or an earlier one since the run last entered the state), most
        recent first."""
        snap = self.ctx.fsm
        path = snap["path"] if snap is not None else []
        done = {*case["compensated"], *(snap.get("compensated", []) if snap else [])}
        found: list[str] = []
        for state in reversed(committed(path)):
            spec = self.fsm.states.get(state)
            if spec is not None and spec.compensate is not None and state not in found \
                    and state not in done:
                found.append(state)
        return found

    def _compensate(self, case: CaseDoc, state: str, reason: str) -> Decision:
        node = self.fsm.states[state].compensate
        assert node is not None
        self._record(case, ev.RecoveryCaseCompensationStarted(
            case_id=case["case_id"], workflow=self.fsm.id, state=case["state"], node=node,
            compensates=state, reason=reason))
        if self.state != "Compensating":
            self._accept("Compensating", None)
        return Next(node, {"case_id": case["case_id"], "compensates": state,
                           "input": self.ctx.input})

    def _escalated(self, case: CaseDoc, reason: str, error: ev.Error | None) -> Decision:
        case = self._record(case, ev.RecoveryCaseEscalated(
            case_id=case["case_id"], workflow=self.fsm.id, state=case["state"],
            reason=reason, cycles=case["cycles"], compensated=list(case["compensated"]),
            error=error))
        subject = self._subject(case, reason)
        self._accept("HumanReview", None)
        return Review(f"recovery case escalated: {reason}", subject,
                      self._policy(case).review_expires_in)

    def _subject(self, case: CaseDoc, reason: str) -> dict[str, object]:
        """What the reviewer sees; an approval resumes ``to`` (the failing state)."""
        return {"workflow": self.fsm.id, "case_id": case["case_id"], "from": self.state,
                "to": case["state"], "recovery": reason}

    def _record(self, case: CaseDoc | None, payload: ev.Payload) -> CaseDoc:
        """Record a case event with the decision (and on the step's span, when traced)
        and fold it into ``case``."""
        self.ctx.emit(payload)
        span_event(payload)
        folded = fold_case(case, payload)
        assert folded is not None
        return folded
