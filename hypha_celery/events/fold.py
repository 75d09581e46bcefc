"""Fold events into the run projection.

The store maintains the projection with exactly this function inside the
append transaction, and ``rebuild`` runs it over the log: the two cannot
diverge except through a bug, and a test compares them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from hypha_celery.events.cases import CASE_PAYLOADS, fold_case
from hypha_celery.events.kinds import KINDS
from hypha_celery.events.payloads import (
    PAYLOADS,
    FsmStateEntered,
    HumanReviewApproved,
    HumanReviewCancelled,
    HumanReviewExpired,
    HumanReviewRejected,
    HumanReviewRequested,
    NodeExecutionCompleted,
    NodeExecutionFailed,
    NodeExecutionRedelivered,
    NodeExecutionRetrying,
    NodeExecutionScheduled,
    NodeFanoutScheduled,
    NodeReducerCompleted,
    NodeReducerFailed,
    P,
    Payload,
    RecoveryCaseCompensated,
    RecoveryCaseOpened,
    RecoveryRunRedriven,
    RunCancelled,
    RunCancelRequested,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunParked,
    RunQuarantined,
    RunRedriven,
    RunReleased,
    RunStarted,
    RunSuspended,
    RunWaitingHuman,
    reader,
)
from hypha_celery.events.status import TERMINAL_STATUSES, RunStatus
from hypha_celery.events.view import FsmPosition, LastOutcome, View

__all__ = ["PASSIVE_KINDS", "View", "apply_event", "apply_payload", "fold", "new_view"]

_Handler = Callable[[View, Payload], None]


def new_view(run_id: str) -> View:
    return {
        "run_id": run_id,
        "graph_id": None,
        "status": RunStatus.NEW,
        "user_id": None,
        "session_id": None,
        "lane": None,
        "input": None,
        "state": {},
        "step": 0,
        "waiting": None,
        "waiting_nodes": [],
        "last": None,
        "result": None,
        "error": None,
        "deadline": None,
        "max_steps": None,
        "notify": None,
        "idempotency_key": None,
        "cancel_requested": False,
        # the awaited execution's failure bookkeeping (reset when a step is scheduled)
        "attempt": 1,
        "retry_at": None,
        "deliveries": 1,
        "recoveries": 0,
        "quarantine": None,
        "parked": None,
        "fanout": 0,  # the awaited execution is a fan-out of this many edges
        "created_at": None,
        "updated_at": None,
        # workflows (hypha_celery.fsm): {"workflow", "state", "path"} once a state is entered
        "fsm": None,
        # human reviews by id: {"status", "subject", "reason", "expires_at", ...}
        "reviews": {},
        "held_since": None,  # waiting_human since (the run's deadline stops meanwhile)
    }


def _created(v: View, p: RunCreated) -> None:
    v["graph_id"] = p.graph_id
    v["user_id"] = p.user_id
    v["session_id"] = p.session_id
    v["lane"] = p.lane
    v["input"] = p.input
    v["deadline"] = p.deadline
    v["max_steps"] = p.max_steps
    v["notify"] = p.notify
    v["idempotency_key"] = p.idempotency_key
    v["status"] = RunStatus.QUEUED


def _await(v: View, execution_id: str, nodes: list[str], edges: int = 0) -> None:
    v["waiting"] = execution_id
    v["waiting_nodes"] = nodes
    v["attempt"] = 1
    v["retry_at"] = None
    v["deliveries"] = 1
    v["recoveries"] = 0
    v["fanout"] = edges


def _started(v: View, p: RunStarted) -> None:
    v["status"] = RunStatus.RUNNING
    _await(v, p.execution_id, [])


def _scheduled(v: View, p: NodeExecutionScheduled) -> None:
    v["step"] = p.step
    _await(v, p.execution_id, [p.node_id])


def _fanout(v: View, p: NodeFanoutScheduled) -> None:
    v["step"] = p.step
    _await(v, p.execution_id, [e["node_id"] for e in p.edges], len(p.edges))


def _retrying(v: View, p: NodeExecutionRetrying) -> None:
    if p.execution_id == v["waiting"]:  # an edge retry keeps the fan-out's counters
        v["attempt"] = p.attempt + 1
        v["deliveries"] = 1
    v["retry_at"] = p.at


def _redelivered(v: View, p: NodeExecutionRedelivered) -> None:
    if p.execution_id == v["waiting"]:  # an edge's count is its own
        v["deliveries"] = max(int(v["deliveries"] or 1), int(p.delivery))


def _redriven(v: View, p: RecoveryRunRedriven) -> None:
    v["recoveries"] = int(p.attempt)
    if p.node_attempt:
        v["attempt"] = int(p.node_attempt)


def _quarantined(v: View, p: RunQuarantined) -> None:
    v["status"] = RunStatus.QUARANTINED
    v["quarantine"] = {"execution_id": p.execution_id, "node_id": p.node_id,
                       "reason": p.reason, "attempt": p.attempt}


def _awaiting_message(v: View, p: RunSuspended) -> None:
    v["awaiting_message"] = {"execution_id": p.execution_id, "node_id": p.node_id,
                             "attempt": p.attempt, "message_id": p.message_id,
                             "queue": p.queue, "until": p.until}


def _released(v: View, p: RunReleased) -> None:
    v["status"] = RunStatus.RUNNING
    v.pop("awaiting_message", None)
    if p.deadline is not None:
        v["deadline"] = p.deadline
    v["quarantine"] = None
    v["attempt"] = int(p.attempt or v["attempt"] or 1)


def _parked(v: View, p: RunParked) -> None:
    v["status"] = RunStatus.PARKED
    v["parked"] = {"execution_id": p.execution_id,
                   "dead_letter_id": cast(int, p.dead_letter_id)}


def _unparked(v: View, p: RunRedriven) -> None:
    v["status"] = RunStatus.RUNNING
    if p.deadline is not None:
        v["deadline"] = p.deadline
    v["parked"] = None
    _await(v, p.execution_id, [p.node_id])


def _applied(v: View, name: str, p: NodeExecutionCompleted | NodeExecutionFailed
             | NodeReducerCompleted | NodeReducerFailed, dead_letter_id: int | None) -> None:
    ok = p.error is None
    if ok:
        v["state"].update(p.update)
    last: LastOutcome = {"node_id": name, "execution_id": p.execution_id, "ok": ok,
                         "value": p.update if ok else None, "error": p.error}
    if dead_letter_id is not None:
        last["dead_letter_id"] = dead_letter_id
    v["last"] = last
    v["waiting"] = None
    v["waiting_nodes"] = []
    v["retry_at"] = None
    v.pop("awaiting_message", None)


def _node_outcome(v: View, p: NodeExecutionCompleted | NodeExecutionFailed) -> None:
    if p.edge_of:
        return  # edge outcomes reach the state only through the reducer
    _applied(v, p.node_id, p, p.dead_letter_id)


def _reducer_outcome(v: View, p: NodeReducerCompleted | NodeReducerFailed) -> None:
    _applied(v, p.reducer, p, None)


def _cancel_requested(v: View, p: RunCancelRequested) -> None:
    v["cancel_requested"] = True


def _ended(v: View, status: RunStatus) -> None:
    v["status"] = status
    v["waiting"] = None
    v["waiting_nodes"] = []
    v["quarantine"] = v["parked"] = None
    v.pop("awaiting_message", None)


def _completed(v: View, p: RunCompleted) -> None:
    _ended(v, RunStatus.COMPLETED)
    v["result"] = p.result


def _failed(v: View, p: RunFailed) -> None:
    _ended(v, RunStatus.FAILED)
    v["error"] = {"reason": p.reason if p.reason is not None else RunStatus.FAILED,
                  "message": p.message}


def _cancelled(v: View, p: RunCancelled) -> None:
    _ended(v, RunStatus.CANCELLED)
    v["error"] = {"reason": p.reason if p.reason is not None else RunStatus.CANCELLED,
                  "message": p.message}


def _waiting_human(v: View, p: RunWaitingHuman) -> None:
    if v["status"] not in TERMINAL_STATUSES:
        v["status"] = RunStatus.WAITING_HUMAN
        if p.review_id:  # the coordinator's resume message is awaited under its id
            v["waiting"] = p.review_id
            v["waiting_nodes"] = []
        v["held_since"] = p.at


def _review_requested(v: View, p: HumanReviewRequested) -> None:
    if not p.review_id:
        return
    v["reviews"][p.review_id] = {"status": "pending", "subject": p.subject, "reason": p.reason,
                                 "expires_at": p.expires_at, "step": p.step}


def _reviewed(v: View, p: HumanReviewApproved | HumanReviewRejected | HumanReviewExpired
              | HumanReviewCancelled, status: str) -> None:
    review = v["reviews"].get(p.review_id or "")
    if review is not None:
        review["status"] = status
        review["by"] = p.by
    if v["status"] == RunStatus.WAITING_HUMAN:
        v["status"] = RunStatus.RUNNING
        held, at, deadline = v["held_since"], p.at, v["deadline"]
        if deadline is not None and held is not None and at is not None:
            # the time spent with a human is not counted
            v["deadline"] = deadline + max(0.0, at - held)
        v["held_since"] = None


def _approved(v: View, p: HumanReviewApproved) -> None:
    _reviewed(v, p, "approved")
    review = v["reviews"].get(p.review_id or "")
    if review is not None and p.note:  # what the policy reads back (a LangGraph resume)
        review["note"] = p.note


def _rejected(v: View, p: HumanReviewRejected) -> None:
    _reviewed(v, p, "rejected")


def _expired(v: View, p: HumanReviewExpired) -> None:
    _reviewed(v, p, "expired")


def _review_cancelled(v: View, p: HumanReviewCancelled) -> None:
    _reviewed(v, p, "cancelled")


def _fsm_entered(v: View, p: FsmStateEntered) -> None:
    if not p.state:
        return
    fsm: FsmPosition = v["fsm"] or {"workflow": p.workflow, "state": None, "path": []}
    fsm["state"] = p.state
    fsm["path"] = [*fsm["path"], p.state]
    if p.state in fsm.get("compensated", ()):  # entered again: its effect may be again
        fsm["compensated"] = [s for s in fsm["compensated"] if s != p.state]
    fsm["step"] = p.step  # the run's step when entered: its node has run once it moved
    v["fsm"] = fsm


def _case(v: View, p: Payload) -> None:
    fsm: FsmPosition = v["fsm"] or {"workflow": None, "state": None, "path": []}
    fsm["case"] = fold_case(fsm.get("case"), p)
    if isinstance(p, RecoveryCaseOpened):
        fsm["cases"] = int(fsm.get("cases") or 0) + 1
    elif isinstance(p, RecoveryCaseCompensated):  # undone until the state is entered again
        fsm["compensated"] = [*fsm.get("compensated", []), p.compensates]
    v["fsm"] = fsm


#: The handler of each kind that changes the projection, by its payload model.
_FOLDS: dict[str, _Handler] = {}


def _on(model: type[P]) -> Callable[[Callable[[View, P], None]], None]:
    def register(handler: Callable[[View, P], None]) -> None:
        _FOLDS[model.kind] = cast(_Handler, handler)
    return register


_on(RunCreated)(_created)
_on(RunStarted)(_started)
_on(NodeExecutionScheduled)(_scheduled)
_on(NodeFanoutScheduled)(_fanout)
_on(NodeExecutionCompleted)(_node_outcome)
_on(NodeExecutionFailed)(_node_outcome)
_on(NodeReducerCompleted)(_reducer_outcome)
_on(NodeReducerFailed)(_reducer_outcome)
_on(NodeExecutionRetrying)(_retrying)
_on(NodeExecutionRedelivered)(_redelivered)
_on(RecoveryRunRedriven)(_redriven)
_on(RunQuarantined)(_quarantined)
_on(RunSuspended)(_awaiting_message)
_on(RunReleased)(_released)
_on(RunParked)(_parked)
_on(RunRedriven)(_unparked)
_on(RunCancelRequested)(_cancel_requested)
_on(RunCompleted)(_completed)
_on(RunFailed)(_failed)
_on(RunCancelled)(_cancelled)
_on(RunWaitingHuman)(_waiting_human)
_on(HumanReviewRequested)(_review_requested)
_on(HumanReviewApproved)(_approved)
_on(HumanReviewRejected)(_rejected)
_on(HumanReviewExpired)(_expired)
_on(HumanReviewCancelled)(_review_cancelled)
_on(FsmStateEntered)(_fsm_entered)
for _model in CASE_PAYLOADS:
    _on(_model)(_case)

#: Kinds that leave the projection document unchanged (only ``seq`` moves): the other
#: families (decisions, calls, messages, evaluation, an agent's stream, ...) are facts
#: about the run that leave its projection as it is.
PASSIVE_KINDS = frozenset(KINDS - _FOLDS.keys())
_READERS = {kind: reader(PAYLOADS[kind]) for kind in _FOLDS}


def apply_event(view: View, kind: str, data: Mapping[str, Any], ts: float) -> None:
    """Apply one event to ``view`` in place: ``kind`` and its stored ``data`` (read as
    its payload model, trusted: :func:`~hypha_celery.events.payloads.payload_of`);
    ``KeyError`` for a kind of no taxonomy."""
    handler = _FOLDS.get(kind)
    if handler is not None:
        handler(view, _READERS[kind](data))
    elif kind not in PASSIVE_KINDS:
        raise KeyError(kind)
    _touch(view, ts)


def apply_payload(view: View, payload: Payload, ts: float) -> None:
    """:func:`apply_event` for a payload a writer built (no read of its JSON)."""
    handler = _FOLDS.get(payload.kind)
    if handler is not None:
        handler(view, payload)
    _touch(view, ts)


def _touch(view: View, ts: float) -> None:
    if view["created_at"] is None:
        view["created_at"] = ts
    view["updated_at"] = ts


def fold(run_id: str, events: Iterable[tuple[str, Mapping[str, Any], float]]) -> View:
    """Rebuild a run projection from ``(kind, data, ts)`` triples, oldest first."""
    view = new_view(run_id)
    for kind, data, ts in events:
        apply_event(view, kind, data, ts)
    return view
