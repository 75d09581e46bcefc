"""Fold events into the run projection.

The store maintains the projection with exactly this function inside the
append transaction, and ``rebuild`` runs it over the log: the two cannot
diverge except through a bug, and a test compares them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from hypha_celery.events.envelope import AGENT_KINDS, KINDS
from hypha_celery.events.status import TERMINAL_STATUSES, Status
from hypha_celery.events.view import FsmPosition, LastOutcome, View

__all__ = ["PASSIVE_KINDS", "View", "apply_event", "fold", "new_view"]

_Handler = Callable[[View, Mapping[str, Any]], None]


def new_view(run_id: str) -> View:
    return {
        "run_id": run_id,
        "graph_id": None,
        "status": Status.NEW,
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


def _created(v: View, d: Mapping[str, Any]) -> None:
    v["graph_id"] = d.get("graph_id")
    v["user_id"] = d.get("user_id")
    v["session_id"] = d.get("session_id")
    v["lane"] = d.get("lane")
    v["input"] = d.get("input")
    v["deadline"] = d.get("deadline")
    v["max_steps"] = d.get("max_steps")
    v["notify"] = d.get("notify")
    v["idempotency_key"] = d.get("idempotency_key")
    v["status"] = Status.QUEUED


def _await(v: View, execution_id: str, nodes: list[str], edges: int = 0) -> None:
    v["waiting"] = execution_id
    v["waiting_nodes"] = nodes
    v["attempt"] = 1
    v["retry_at"] = None
    v["deliveries"] = 1
    v["recoveries"] = 0
    v["fanout"] = edges


def _started(v: View, d: Mapping[str, Any]) -> None:
    v["status"] = Status.RUNNING
    _await(v, d["execution_id"], [])


def _scheduled(v: View, d: Mapping[str, Any]) -> None:
    v["step"] = d["step"]
    _await(v, d["execution_id"], [d["node_id"]])


def _fanout(v: View, d: Mapping[str, Any]) -> None:
    v["step"] = d["step"]
    _await(v, d["execution_id"], [e["node_id"] for e in d["edges"]], len(d["edges"]))


def _retrying(v: View, d: Mapping[str, Any]) -> None:
    if d["execution_id"] == v["waiting"]:  # an edge retry keeps the fan-out's counters
        v["attempt"] = d["attempt"] + 1
        v["deliveries"] = 1
    v["retry_at"] = d.get("at")


def _redelivered(v: View, d: Mapping[str, Any]) -> None:
    if d["execution_id"] == v["waiting"]:  # an edge's count is its own
        v["deliveries"] = max(int(v["deliveries"] or 1), int(d["delivery"]))


def _redriven(v: View, d: Mapping[str, Any]) -> None:
    v["recoveries"] = int(d["attempt"])
    if d.get("node_attempt"):
        v["attempt"] = int(d["node_attempt"])


def _quarantined(v: View, d: Mapping[str, Any]) -> None:
    v["status"] = Status.QUARANTINED
    v["quarantine"] = {"execution_id": d["execution_id"], "node_id": d.get("node_id"),
                       "reason": d.get("reason"), "attempt": d.get("attempt", 1)}


def _released(v: View, d: Mapping[str, Any]) -> None:
    v["status"] = Status.RUNNING
    v["deadline"] = d.get("deadline", v["deadline"])
    v["quarantine"] = None
    v["attempt"] = int(d.get("attempt") or v["attempt"] or 1)


def _parked(v: View, d: Mapping[str, Any]) -> None:
    v["status"] = Status.PARKED
    v["parked"] = {"execution_id": d["execution_id"], "dead_letter_id": d["dead_letter_id"]}


def _unparked(v: View, d: Mapping[str, Any]) -> None:
    v["status"] = Status.RUNNING
    v["deadline"] = d.get("deadline", v["deadline"])
    v["parked"] = None
    _await(v, d["execution_id"], [d["node_id"]])


def _outcome(v: View, d: Mapping[str, Any]) -> None:
    if d.get("edge_of"):
        return  # edge outcomes reach the state only through the reducer
    ok = "error" not in d
    name = cast(str, d.get("node_id") or d.get("reducer"))
    if ok:
        v["state"].update(d["update"])
    last: LastOutcome = {
        "node_id": name,
        "execution_id": d["execution_id"],
        "ok": ok,
        "value": d.get("update") if ok else None,
        "error": d.get("error"),
    }
    if d.get("dead_letter_id") is not None:
        last["dead_letter_id"] = d["dead_letter_id"]
    v["last"] = last
    v["waiting"] = None
    v["waiting_nodes"] = []
    v["retry_at"] = None


def _cancel_requested(v: View, d: Mapping[str, Any]) -> None:
    v["cancel_requested"] = True


def _terminal(status: Status) -> _Handler:
    def handler(v: View, d: Mapping[str, Any]) -> None:
        v["status"] = status
        v["waiting"] = None
        v["waiting_nodes"] = []
        v["quarantine"] = v["parked"] = None
        if status == Status.COMPLETED:
            v["result"] = d.get("result")
        else:
            v["error"] = {"reason": d.get("reason", status), "message": d.get("message", "")}

    return handler


def _nothing(v: View, d: Mapping[str, Any]) -> None:
    return None


def _waiting_human(v: View, d: Mapping[str, Any]) -> None:
    if v["status"] not in TERMINAL_STATUSES:
        v["status"] = Status.WAITING_HUMAN
        if d.get("review_id"):  # the coordinator's resume message is awaited under its id
            v["waiting"] = d["review_id"]
            v["waiting_nodes"] = []
        v["held_since"] = d.get("at")


def _review_requested(v: View, d: Mapping[str, Any]) -> None:
    if not d.get("review_id"):
        return
    v["reviews"][d["review_id"]] = {
        "status": "pending", "subject": d.get("subject"), "reason": d.get("reason"),
        "expires_at": d.get("expires_at"), "step": d.get("step")}


def _reviewed(v: View, d: Mapping[str, Any], status: str) -> None:
    review = v["reviews"].get(d.get("review_id") or "")
    if review is not None:
        review["status"] = status
        review["by"] = d.get("by")
    if v["status"] == Status.WAITING_HUMAN:
        v["status"] = Status.RUNNING
        held, at, deadline = v["held_since"], d.get("at"), v["deadline"]
        if deadline is not None and held is not None and at is not None:
            # the time spent with a human is not counted
            v["deadline"] = deadline + max(0.0, at - held)
        v["held_since"] = None


def _review_outcome(status: str) -> _Handler:
    return lambda v, d: _reviewed(v, d, status)


def _fsm_entered(v: View, d: Mapping[str, Any]) -> None:
    if not d.get("state"):
        return
    fsm: FsmPosition = v["fsm"] or {"workflow": d.get("workflow"), "state": None, "path": []}
    fsm["state"] = d["state"]
    fsm["path"] = [*fsm["path"], d["state"]]
    fsm["step"] = d.get("step")  # the run's step when entered: its node has run once it moved
    v["fsm"] = fsm


_HANDLERS: dict[str, _Handler] = {
    "run.created": _created,
    "run.queued": _nothing,
    "run.started": _started,
    "decision.policy.recorded": _nothing,
    "node.execution.scheduled": _scheduled,
    "node.fanout.scheduled": _fanout,
    "node.execution.started": _nothing,
    "node.execution.completed": _outcome,
    "node.execution.failed": _outcome,
    "node.execution.late_result": _nothing,
    "node.reducer.completed": _outcome,
    "node.reducer.failed": _outcome,
    "node.execution.retrying": _retrying,
    "node.execution.redelivered": _redelivered,
    "node.execution.dead_lettered": _nothing,
    "recovery.run.redriven": _redriven,
    "recovery.node.timed_out": _nothing,
    "recovery.outcome.reconciled": _nothing,
    "recovery.redrive.exhausted": _nothing,
    "recovery.circuit.opened": _nothing,
    "run.quarantined": _quarantined,
    "run.released": _released,
    "run.parked": _parked,
    "run.redriven": _unparked,
    "run.cancel.requested": _cancel_requested,
    "run.completed": _terminal(Status.COMPLETED),
    "run.failed": _terminal(Status.FAILED),
    "run.cancelled": _terminal(Status.CANCELLED),
    "run.waiting_human": _waiting_human,
    "human.review.requested": _review_requested,
    "human.review.approved": _review_outcome("approved"),
    "human.review.rejected": _review_outcome("rejected"),
    "human.review.expired": _review_outcome("expired"),
    "human.review.cancelled": _review_outcome("cancelled"),
    "fsm.state.entered": _fsm_entered,
    **{kind: _nothing for kind in AGENT_KINDS},  # an agent's stream is not a run
}
# the other families (model and tool calls, messages, evaluation, ...) are facts about
# the run that leave its projection as it is
_HANDLERS.update({kind: _nothing for kind in KINDS if kind not in _HANDLERS})

#: Kinds that leave the projection document unchanged (only ``seq`` moves).
PASSIVE_KINDS = frozenset(k for k, h in _HANDLERS.items() if h is _nothing)


def apply_event(view: View, kind: str, data: Mapping[str, Any], ts: float) -> None:
    """Apply one event to ``view`` in place."""
    _HANDLERS[kind](view, data)
    if view["created_at"] is None:
        view["created_at"] = ts
    view["updated_at"] = ts


def fold(run_id: str, events: Iterable[tuple[str, Mapping[str, Any], float]]) -> View:
    """Rebuild a run projection from ``(kind, data, ts)`` triples, oldest first."""
    view = new_view(run_id)
    for kind, data, ts in events:
        apply_event(view, kind, data, ts)
    return view
