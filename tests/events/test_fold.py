"""The event envelope and the fold that turns events into the run projection."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pydantic
import pytest

import hypha_celery
from hypha_celery import Event
from hypha_celery.errors import NotTheLifecycleWriter
from hypha_celery.events import KINDS, TERMINAL_KINDS, apply_event, fold, new_view
from hypha_celery.events.envelope import AGENT_KINDS
from hypha_celery.events.fold import PASSIVE_KINDS
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore
from tests.events.test_payloads import RECORDED

R = "run1"


def created(**extra: Any) -> tuple[str, dict[str, Any], float]:
    data = {"graph_id": "g", "input": {"q": 1}, "user_id": "u", "session_id": "s",
            "lane": '["u", "s"]', "deadline": 99.0, "max_steps": 5, "notify": None,
            "idempotency_key": "k", **extra}
    return ("run.created", data, 1.0)


LINEAR = [
    created(),
    ("run.started", {"execution_id": f"{R}.0"}, 2.0),
    ("decision.policy.recorded", {"step": 0, "type": "next", "node_ids": ["a"]}, 3.0),
    ("node.execution.scheduled", {"execution_id": f"{R}.1", "node_id": "a", "input": None,
                                  "step": 1}, 3.0),
    ("node.execution.started", {"execution_id": f"{R}.1", "node_id": "a", "attempt": 1}, 4.0),
    ("node.execution.completed", {"execution_id": f"{R}.1", "node_id": "a", "update": {"x": 1}},
     5.0),
    ("decision.policy.recorded", {"step": 1, "type": "fanout"}, 6.0),
    ("node.fanout.scheduled", {"execution_id": f"{R}.2", "step": 2, "reducer": "m", "edges": [
        {"execution_id": f"{R}.2.0", "node_id": "b"},
        {"execution_id": f"{R}.2.1", "node_id": "c"}]}, 6.0),
    ("node.execution.completed", {"execution_id": f"{R}.2.0", "node_id": "b", "edge_of": f"{R}.2",
                        "index": 0, "update": {"edge": "b"}}, 7.0),
    ("node.execution.failed", {"execution_id": f"{R}.2.1", "node_id": "c", "edge_of": f"{R}.2",
                     "index": 1, "error": {"type": "E", "message": "m"}}, 7.5),
    ("node.reducer.completed", {"execution_id": f"{R}.2", "reducer": "m", "update": {"y": 2}}, 8.0),
    ("decision.policy.recorded", {"step": 2, "type": "finish"}, 9.0),
    ("run.completed", {"result": {"ok": True}}, 9.0),
    ("node.execution.late_result", {"execution_id": f"{R}.2.1", "node_id": "c", "reason": "x"},
     10.0),
]


def test_kinds() -> None:
    assert {"run.completed", "run.failed", "run.cancelled"} == TERMINAL_KINDS
    assert TERMINAL_KINDS <= KINDS and PASSIVE_KINDS <= KINDS
    assert len(AGENT_KINDS) == 10


HYPHA_TWO_PART = ("run", "session", "message", "eval", "replay", "regression", "skill",
                  "inference",
                  "thinking")
#: hypha's own four-part MCP names.
HYPHA_FOUR_PART = ("mcp.capability.trust.evaluated", "mcp.capability.drift.detected")
#: hypha's own names whose noun is their area (``context.compacted``).
HYPHA_OTHER = ("context.compacted",)


def test_event_types_follow_the_area_noun_past_tense_taxonomy() -> None:
    """``<area>.<noun>.<past-tense>``; hypha's own two-part families keep their names
    (run lifecycle, messages, eval / replay / regression);
    hypha's own non-past endings (late_result, waiting_human, retrying, tool.output.invalid)
    and redriven are allowed."""
    for kind in KINDS - AGENT_KINDS:
        parts = kind.split(".")
        assert len(parts) == 3 or (len(parts) == 2 and parts[0] in HYPHA_TWO_PART) \
            or kind in HYPHA_FOUR_PART + HYPHA_OTHER, kind
        past = any(word.endswith("ed") for word in parts[-1].split("_"))  # timed_out
        assert past or parts[-1] in ("late_result", "waiting_human", "retrying", "redriven",
                                   "invalid"), kind
    assert {"node.execution.late_result", "node.execution.started",
            "decision.policy.recorded"} <= PASSIVE_KINDS
    assert not TERMINAL_KINDS & PASSIVE_KINDS


def test_fold_of_a_completed_run() -> None:
    v = fold(R, LINEAR)
    assert v["status"] == "completed" and v["result"] == {"ok": True}
    assert v["state"] == {"x": 1, "y": 2}  # edge values reach the state only via the reducer
    assert v["step"] == 2 and v["waiting"] is None and v["waiting_nodes"] == []
    assert v["last"] == {"node_id": "m", "execution_id": f"{R}.2", "ok": True,
                         "value": {"y": 2}, "error": None}
    assert (v["graph_id"], v["user_id"], v["session_id"], v["lane"]) == (
        "g", "u", "s", '["u", "s"]')
    assert (v["deadline"], v["max_steps"], v["idempotency_key"]) == (99.0, 5, "k")
    assert (v["created_at"], v["updated_at"]) == (1.0, 10.0)


def test_fold_tracks_what_the_run_waits_for() -> None:
    v = fold(R, LINEAR[:2])
    assert (v["status"], v["waiting"]) == ("running", f"{R}.0")
    v = fold(R, LINEAR[:4])
    assert (v["waiting"], v["waiting_nodes"], v["step"]) == (f"{R}.1", ["a"], 1)
    v = fold(R, LINEAR[:8])
    assert (v["waiting"], v["waiting_nodes"]) == (f"{R}.2", ["b", "c"])
    v = fold(R, LINEAR[:10])  # edge outcomes do not end the wait
    assert v["waiting"] == f"{R}.2" and v["state"] == {"x": 1}


def test_failed_node_sets_last_and_merges_nothing() -> None:
    evs = [*LINEAR[:4], ("node.execution.failed", {"execution_id": f"{R}.1", "node_id": "a",
                                         "error": {"type": "ValueError", "message": "no"}}, 5.0),
           ("run.failed", {"reason": "node_failed", "message": "a: ValueError: no"}, 6.0)]
    v = fold(R, evs)
    assert v["state"] == {} and v["status"] == "failed"
    assert v["last"]["ok"] is False and v["last"]["error"]["type"] == "ValueError"
    assert v["error"] == {"reason": "node_failed", "message": "a: ValueError: no"}
    assert v["result"] is None


def test_cancelled_and_queued() -> None:
    v = fold(R, [created(), ("run.queued", {"behind": "r0"}, 2.0)])
    assert v["status"] == "queued"
    v = fold(R, [*LINEAR[:4], ("run.cancel.requested", {}, 5.0),
                 ("run.cancelled", {"reason": "cancelled", "message": "by request"}, 5.0)])
    assert v["status"] == "cancelled" and v["cancel_requested"] is True
    assert v["error"] == {"reason": "cancelled", "message": "by request"}
    assert v["waiting"] is None


@pytest.mark.parametrize("kind", sorted(PASSIVE_KINDS))
def test_passive_kinds_change_only_updated_at(kind: str) -> None:
    v = fold(R, LINEAR[:4])
    before = copy.deepcopy(v)
    apply_event(v, kind, {"execution_id": "x", "node_id": "a", "step": 9, "reason": "r"}, 50.0)
    assert v.pop("updated_at") == 50.0
    before.pop("updated_at")
    assert v == before


def _outcome(node: str, data: dict[str, Any], ok: bool) -> dict[str, Any]:
    """The ``last`` a node's or reducer's outcome leaves (an edge's leaves none)."""
    if data.get("edge_of"):
        return {}
    last = {"node_id": node, "execution_id": data["execution_id"], "ok": ok,
            "value": data["update"] if ok else None, "error": None if ok else data["error"]}
    if "dead_letter_id" in data:
        last["dead_letter_id"] = data["dead_letter_id"]
    state = {"state": data["update"]} if ok and node == data.get("reducer") else {}
    return {"waiting": None, "last": last, **state}


def _ended(status: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"status": status, "waiting": None,
            "error": {"reason": data["reason"], "message": data["message"]}}


#: The recorded ``recovery.case.opened`` (a case's other events are applied after it).
OPENED = next(r["payload"] for r in RECORDED if r["type"] == "recovery.case.opened")
#: That case as the fold of its opening holds it.
CASE = {"case_id": OPENED["case_id"], "state": OPENED["state"], "node": OPENED["node"],
        "status": "open", "opened_at": OPENED["at"], "fingerprint": OPENED["fingerprint"],
        "evidence": OPENED["evidence"], "cycles": 0, "strategy": None, "attempts": 0,
        "no_progress": 0, "tried": [], "compensating": None, "compensated": [],
        "reason": None}


def _case(**changed: Any) -> dict[str, Any]:
    """A recovery case event: the run's workflow snapshot holds the case changed so."""
    return {"fsm": {"workflow": None, "state": None, "path": [], "cases": 1,
                    "case": {**CASE, **changed}}}


_CASE_FOLDED = {
    "recovery.case.opened": lambda d: _case(),
    "recovery.case.attempted": lambda d: _case(
        cycles=d["cycle"], strategy=d["strategy"], attempts=d["attempt"],
        evidence=d["evidence"], tried=[d["strategy"]]),
    "recovery.case.compensation_started": lambda d: _case(
        status="compensating", compensating=d["compensates"], reason=d["reason"]),
    "recovery.case.compensated": lambda d: {"fsm": {
        **_case(compensated=[d["compensates"]])["fsm"], "compensated": [d["compensates"]]}},
    "recovery.case.quarantined": lambda d: _case(status="quarantined", reason=d["reason"]),
    "recovery.case.resolved": lambda d: _case(status=d["status"], reason=d["strategy"]),
    "recovery.case.escalated": lambda d: _case(status="escalated", reason=d["reason"]),
}


def _review_decided(data: dict[str, Any]) -> dict[str, Any]:
    """The run runs again, its deadline moved by the time it was held (since 3.5, with
    99.0 as its deadline)."""
    return {"status": "running", "held_since": None, "deadline": data["at"] + 99.0 - 3.5}


#: What each kind that is not passive does to a running run awaiting ``R.0``: every field
#: it changes, with its value (from the kind's recorded payload ``data``).
FOLDED: dict[str, Any] = {
    "run.created": lambda d: {"status": "queued", **{k: d[k] for k in (
        "graph_id", "input", "user_id", "session_id", "lane", "deadline", "max_steps",
        "idempotency_key")}},
    "run.started": lambda d: {"waiting": d["execution_id"]},
    "run.completed": lambda d: {"status": "completed", "waiting": None,
                                "result": d["result"]},
    "run.failed": lambda d: _ended("failed", d),
    "run.cancelled": lambda d: _ended("cancelled", d),
    "run.cancel.requested": lambda d: {"cancel_requested": True},
    "run.parked": lambda d: {"status": "parked", "parked": {
        "execution_id": d["execution_id"], "dead_letter_id": d["dead_letter_id"]}},
    "run.quarantined": lambda d: {"status": "quarantined", "quarantine": {
        k: d[k] for k in ("execution_id", "node_id", "reason", "attempt")}},
    "run.suspended": lambda d: {"awaiting_message": {
        k: d[k] for k in ("execution_id", "node_id", "attempt", "message_id", "queue",
                          "until")}},
    "run.redriven": lambda d: {"deadline": d["deadline"], "waiting": d["execution_id"],
                               "waiting_nodes": [d["node_id"]]},
    "run.released": lambda d: {"deadline": d["deadline"], "attempt": d["attempt"]},
    "run.waiting_human": lambda d: {"status": "waiting_human", "waiting": d["review_id"],
                                    "held_since": d["at"]},
    "node.execution.scheduled": lambda d: {"step": d["step"], "waiting": d["execution_id"],
                                           "waiting_nodes": [d["node_id"]]},
    "node.fanout.scheduled": lambda d: {"step": d["step"], "waiting": d["execution_id"],
                                        "waiting_nodes": [e["node_id"] for e in d["edges"]],
                                        "fanout": len(d["edges"])},
    "node.execution.completed": lambda d: _outcome(d["node_id"], d, True),
    "node.execution.failed": lambda d: _outcome(d["node_id"], d, False),
    "node.reducer.completed": lambda d: _outcome(d["reducer"], d, True),
    "node.reducer.failed": lambda d: _outcome(d["reducer"], d, False),
    "node.execution.retrying": lambda d: {"attempt": d["attempt"] + 1, "retry_at": d["at"]},
    "node.execution.redelivered": lambda d: {"deliveries": d["delivery"]},
    "recovery.run.redriven": lambda d: {"recoveries": 1, **(
        {"attempt": d["node_attempt"]} if "node_attempt" in d else {})},
    "human.review.requested": lambda d: {"reviews": {d["review_id"]: {
        "status": "pending", **{k: d[k] for k in ("subject", "reason", "expires_at",
                                                  "step")}}}},
    "human.review.approved": _review_decided,
    "human.review.rejected": _review_decided,
    "human.review.expired": _review_decided,
    "human.review.cancelled": _review_decided,
    "fsm.state.entered": lambda d: {"fsm": {"workflow": d["workflow"], "state": d["state"],
                                            "path": [d["state"]], "step": d["step"]}},
    **_CASE_FOLDED,
}


def test_every_kind_folds_and_only_the_passive_ones_change_nothing() -> None:
    """Each recorded payload of each kind, applied to a running run awaiting its
    execution: a passive kind moves only ``updated_at``; every other kind changes exactly
    the fields :data:`FOLDED` lists, to its values (the kinds of the run's own lifecycle,
    of its executions, reviews and workflow), but an edge's outcome changes nothing (its
    reducer's does); an unknown kind is a ``KeyError``."""
    for row in RECORDED:
        kind, data = row["type"], row["payload"]
        v = fold(R, [*LINEAR[:2], ("run.waiting_human", {"review_id": None, "at": 3.5}, 3.5)]
                 if kind.startswith("human.review.") and kind != "human.review.requested"
                 else LINEAR[:2])
        if kind in ("node.execution.retrying", "node.execution.redelivered"):
            v["waiting"] = data["execution_id"]  # what they count is the awaited one's
        if kind.startswith("recovery.case.") and kind != "recovery.case.opened":
            apply_event(v, "recovery.case.opened", OPENED, 4.0)  # the case it is about
        before = copy.deepcopy(v)
        apply_event(v, kind, data, 50.0)
        assert v.pop("updated_at") == 50.0
        before.pop("updated_at")
        expected = {} if kind in PASSIVE_KINDS else FOLDED[kind](data)
        changes = kind not in PASSIVE_KINDS and not data.get("edge_of")  # via the reducer
        assert bool(expected) == changes, (kind, data)
        assert v == {**before, **expected}, (kind, data)  # exactly these fields changed
    assert PASSIVE_KINDS < KINDS and set(FOLDED) == KINDS - PASSIVE_KINDS
    with pytest.raises(KeyError):
        apply_event(new_view(R), "run.exploded", {}, 1.0)


def test_event_envelope_is_strict() -> None:
    e = Event(run_id=R, seq=1, type="run.created", timestamp=1.5, payload={"a": 1})
    assert Event.model_validate_json(e.model_dump_json()) == e
    with pytest.raises(pydantic.ValidationError):
        Event(run_id=R, seq=1, type="run.exploded", timestamp=1.0, payload={})  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError):
        Event.model_validate({"run_id": R, "seq": 1, "kind": "run.created", "ts": 1.0,
                              "data": {}, "extra": 1})
    with pytest.raises(pydantic.ValidationError):
        e.seq = 2  # type: ignore[misc]


def test_only_the_lifecycle_writer_appends_run_events(tmp_path: Path) -> None:
    """hypha's RunManager rule: ``Tx.append`` refuses ``run.*``; the lifecycle module
    writes them, and nothing follows a terminal event."""
    store = EventStore(f"sqlite:///{tmp_path / 'w.db'}")
    try:
        with store.transaction() as tx:
            tx.create(new_view("r"))
            with pytest.raises(NotTheLifecycleWriter, match="run.created"):
                tx.append("r", "run.created", {"graph_id": "g"})
            lifecycle.record(tx, "r", "run.created", {"graph_id": "g"})
            tx.append("r", "eval.started", {})  # other facts are anyone's to record
            lifecycle.record(tx, "r", "run.completed", {"result": 1}, idem="r:terminal")
            with pytest.raises(NotTheLifecycleWriter, match="has ended"):
                lifecycle.record(tx, "r", "run.started", {"execution_id": "r.0"})
            with pytest.raises(NotTheLifecycleWriter, match="not a run or session lifecycle"):
                lifecycle.record(tx, "r", "eval.completed", {})
        assert [e.type for e in store.events("r")] == ["run.created", "eval.started",
                                                       "run.completed"]
    finally:
        store.dispose()


def test_no_module_but_the_lifecycle_writer_appends_run_events_directly() -> None:
    """A structural check: no ``.append(..., "run.…")`` call in the package outside
    runtime/lifecycle.py."""
    import ast

    root = Path(hypha_celery.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if path.name == "lifecycle.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "append" and len(node.args) >= 2 and \
                    isinstance(node.args[1], ast.Constant) and \
                    str(node.args[1].value).startswith("run."):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == []
