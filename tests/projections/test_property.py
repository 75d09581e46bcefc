"""Property: for random valid runs, ``run_view``'s status is the status the store keeps
(its projection, maintained by ``fold`` in the append transaction) on both backends,
and ``run_view`` over the stored envelopes equals ``run_view`` over the generated events.

A generated run: ``run.created`` -> optional ``run.queued`` (a queued run may never
start) -> ``run.started`` -> a few steps, each a decision and a node (with retries,
tool and model calls) or a fan-out with its edges and reducer, the last possibly still
in flight -> an optional human wait (``run.waiting_human``, answered or not; unanswered,
no step follows) -> an optional ``run.cancel.requested`` -> an optional terminal event
(then possibly a late result).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hypha_celery.events import Event, new_view
from hypha_celery.projections import audit_view, run_view
from hypha_celery.store import EventStore
from tests.projections.support import Step, append, created, events

R = "@run"  # replaced by a fresh run id per example
NODES = st.sampled_from(["plan", "search", "write"])
ENDS: dict[str, dict[str, Any]] = {
    "run.completed": {"result": {"answer": 42}},
    "run.failed": {"reason": "node_failed", "message": "write: ValueError: boom"},
    "run.cancelled": {"reason": "cancelled", "message": "cancelled by request"},
}


def _outcome(kind: str, eid: str, ok: bool, **name: Any) -> Step:
    body: dict[str, Any] = {"update": {"k": eid}} if ok else {
        "error": {"type": "ValueError", "message": "boom"}}
    return (f"node.{kind}.{'completed' if ok else 'failed'}",
            {"execution_id": eid, **name, **body, "duration": 0.01})


@st.composite
def calls(draw: st.DrawFn, eid: str) -> list[Step]:
    out: list[Step] = []
    for n, family in enumerate(draw(st.lists(st.sampled_from(["tool", "model"]), max_size=2))):
        call = {"call_id": f"{eid}:{family[0]}{n}", "family": family, "name": f"{family}-x",
                "request_hash": "0123456789abcdef"}
        end = draw(st.sampled_from(["completed", "failed"]))
        result = {"output": {"n": n}} if end == "completed" else {
            "error": {"type": "Timeout", "message": "slow"}}
        out += [(f"{family}.call.started", call), (f"{family}.call.{end}", {**call, **result})]
    return out


@st.composite
def node(draw: st.DrawFn, k: int, finished: bool) -> list[Step]:
    node_id, eid = draw(NODES), f"{R}.{k}"
    out: list[Step] = [
        ("decision.policy.recorded", {"step": k - 1, "type": "next", "node_ids": [node_id]}),
        ("node.execution.scheduled", {"execution_id": eid, "node_id": node_id,
                                      "input": {"k": k}, "step": k}),
    ]
    for attempt in range(1, draw(st.integers(1, 3)) + 1):
        out.append(("node.execution.started", {"execution_id": eid, "node_id": node_id,
                                               "attempt": attempt, "worker": "w"}))
        out += draw(calls(eid))
        if attempt > 1 or draw(st.booleans()):
            break
        out.append(("node.execution.retrying", {"execution_id": eid, "node_id": node_id,
                                                "attempt": attempt, "at": 0.5}))
    if finished:
        out.append(_outcome("execution", eid, draw(st.booleans()), node_id=node_id))
    return out


@st.composite
def fanout(draw: st.DrawFn, k: int, finished: bool) -> list[Step]:
    fid, nodes = f"{R}.{k}", draw(st.lists(NODES, min_size=1, max_size=3))
    edges = [{"execution_id": f"{fid}.{i}", "node_id": n, "input": i}
             for i, n in enumerate(nodes)]
    out: list[Step] = [
        ("decision.policy.recorded", {"step": k - 1, "type": "fanout", "reducer": "merge",
                                      "node_ids": nodes}),
        ("node.fanout.scheduled", {"execution_id": fid, "step": k, "reducer": "merge",
                                   "edges": edges}),
    ]
    for e in edges[:len(edges) if finished else draw(st.integers(0, len(edges)))]:
        out.append(("node.execution.started", {"execution_id": e["execution_id"],
                                               "node_id": e["node_id"], "attempt": 1,
                                               "worker": "w"}))
        out.append(_outcome("execution", e["execution_id"], draw(st.booleans()),
                            node_id=e["node_id"], edge_of=fid))
    if finished:
        out.append(_outcome("reducer", fid, draw(st.booleans()), reducer="merge"))
    return out


@st.composite
def human_wait(draw: st.DrawFn) -> tuple[list[Step], bool]:
    """A human review and the run waiting for it; answered or not."""
    review = {"review_id": "rv1", "wait_id": f"human-review:{R}"}
    out: list[Step] = [("human.review.requested", review), ("run.waiting_human", review)]
    answer = draw(st.sampled_from([None, "approved", "rejected"]))
    if answer is not None:
        out.append((f"human.review.{answer}", {**review, "decision": answer}))
    return out, answer is not None


@st.composite
def execution(draw: st.DrawFn) -> list[Step]:
    """From ``run.started``: the steps, with an optional human wait among them."""
    out: list[Step] = [("run.started", {"execution_id": f"{R}.0"})]
    steps = draw(st.integers(0, 4))
    wait_before = draw(st.one_of(st.none(), st.integers(1, steps + 1)))
    for k in range(1, steps + 2):
        if k == wait_before:
            waited, answered = draw(human_wait())
            out += waited
            if not answered:
                break
        if k > steps:
            break
        finished = k < steps or draw(st.booleans())
        out += draw(st.one_of(node(k, finished), fanout(k, finished)))
        if not finished:
            break
    return out


@st.composite
def runs(draw: st.DrawFn) -> list[Step]:
    user, session = draw(st.sampled_from([(None, None), ("u", "s")]))
    out: list[Step] = [created(user_id=user, session_id=session)]
    queued = draw(st.booleans())
    if queued:
        out.append(("run.queued", {"behind": "another-run"}))
    if not queued or draw(st.booleans()):
        out += draw(execution())
    if draw(st.booleans()):
        out.append(("run.cancel.requested", {"revoked": []}))
    end = draw(st.sampled_from([None, None, *sorted(ENDS)]))
    if end is not None:
        out.append((end, ENDS[end]))
        if draw(st.booleans()):
            out.append(("node.execution.late_result", {"execution_id": f"{R}.1",
                                                       "node_id": "plan", "reason": "timeout"}))
    return out


def _store(store: EventStore, evs: list[Event], commits: list[bool]) -> None:
    """Append ``evs`` through the real store, in transactions ending where ``commits``
    says (the first creates the run)."""
    run_id, i = evs[0].run_id, 0
    while i < len(evs):
        with store.transaction() as tx:
            if i == 0:
                tx.create(new_view(run_id))
            else:
                assert tx.lock(run_id) is not None
            while True:
                append(tx, run_id, evs[i].type, evs[i].payload, ts=evs[i].timestamp)
                i += 1
                if i == len(evs) or commits[i]:
                    break


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=runs(), data=st.data())
def test_run_view_agrees_with_the_store(store: EventStore, plan: list[Step],
                                        data: st.DataObject) -> None:
    run_id = uuid.uuid4().hex
    steps = json.loads(json.dumps(plan).replace(R, run_id))
    tick = data.draw(st.sampled_from([0.0, 0.25, 1.5]), label="tick")
    evs = events(steps, run_id=run_id, t0=1_700_000_000.0, tick=tick)
    _store(store, evs, data.draw(st.lists(st.booleans(), min_size=len(evs),
                                          max_size=len(evs)), label="commits"))

    view, kept = run_view(evs), store.get(run_id)
    event(f"status {view.status}")
    assert view.status == kept["status"]
    assert view.steps == kept["step"]
    assert view.cancel_requested == kept["cancel_requested"]
    assert view.output == kept["result"]
    assert (view.error.reason if view.error else None) == (kept["error"] or {}).get("reason")
    assert (view.user_id, view.session_id, view.graph_id) == (
        kept["user_id"], kept["session_id"], kept["graph_id"])

    stored = store.events(run_id)
    assert run_view(stored) == view
    audited, generated = audit_view(stored), audit_view(evs)
    assert audited.state_path == generated.state_path
    assert audited.decisions == generated.decisions
    assert audited.counts == generated.counts
