"""Workflows running on the real embedded runtime (SQLite and PostgreSQL): the FSM as a
decision policy, its projected snapshot, human review parking and resuming, typed ends."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Hypha, RunFailed
from hypha_celery.beat.supervisor import sweep
from hypha_celery.errors import NoPendingReview
from hypha_celery.fsm import Fsm, WorkflowSpec, workflow_graph
from tests.runtime.support import WAIT, assert_well_formed, running, wait_until

TRIAGE: dict[str, Any] = {
    "id": "triage", "initial_state": "Intake", "terminal_states": ["Done"],
    "output": "variables.reply",
    "states": [{"id": "Intake", "node": "classify"},
               {"id": "Route"},  # routing-only
               {"id": "Refund", "node": "refund", "human_review": {"required": True,
                                                                   "reason": "refund"}},
               {"id": "Answer", "node": "answer"},
               {"id": "Done"}],
    "transitions": [{"from": "Intake", "to": "Route"},
                    {"from": "Route", "to": "Refund", "guard": "variables.intent == 'refund'"},
                    {"from": "Route", "to": "Answer",
                     "guard": "matches(variables.intent, '^(question|other)$')"},
                    {"from": "Refund", "to": "Done"},
                    {"from": "Answer", "to": "Done"}]}


def classify(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    text = str(inp.get("text", ""))
    return {"intent": "refund" if "refund" in text else
            "question" if text.endswith("?") else "unknown"}


NODES = {"classify": classify,
         "refund": lambda state, inp: {"reply": f"refunded {inp['order']}"},
         "answer": lambda state, inp: {"reply": "here is how"}}


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    with running(store_url) as h:
        h.register(workflow_graph(Fsm(WorkflowSpec.model_validate(TRIAGE), NODES), NODES))
        yield h


def kinds(run: Any, prefix: str) -> list[dict[str, Any]]:
    return [e.data for e in run.events() if e.kind.startswith(prefix)]


def test_a_guarded_workflow_runs_and_its_snapshot_is_projected(hypha: Hypha) -> None:
    run = hypha.start("triage", {"text": "how do I log in?"})
    assert run.wait(WAIT) == "here is how"
    view = hypha.store.get(run.id)
    assert view["fsm"]["path"] == ["Intake", "Route", "Answer", "Done"]
    assert view["fsm"]["state"] == "Done"
    accepted = [(d["from"], d["to"]) for d in kinds(run, "fsm.transition.accepted")]
    assert accepted == [("Intake", "Route"), ("Route", "Answer"), ("Answer", "Done")]
    assert [d["state"] for d in kinds(run, "fsm.state.entered")] == view["fsm"]["path"]
    assert_well_formed(run)


def test_workflow_facts_keep_their_json(hypha: Hypha) -> None:
    """Written as payload models (``from_`` in Python), stored as they always were."""
    run = hypha.start("triage", {"text": "how do I log in?"})
    assert run.wait(WAIT) == "here is how"
    entered = kinds(run, "fsm.state.entered")
    assert entered[0] == {"workflow": "triage", "state": "Intake", "from": None, "step": 0}
    assert [list(d) for d in entered] == [["workflow", "state", "from", "step"]] * 4
    assert kinds(run, "fsm.transition.accepted")[1] == {
        "workflow": "triage", "from": "Route", "to": "Answer",
        "guard": "matches(variables.intent, '^(question|other)$')"}


def test_review_decisions_keep_their_json(hypha: Hypha) -> None:
    """human.review.approved / rejected written as payload models, stored as before."""
    ids = []
    for _ in range(2):
        run = hypha.start("triage", {"text": "refund please", "order": "A-1"})
        wait_until(lambda run=run: run.status().status == "waiting_human")
        ids.append(run.id)
    approved = hypha.approve(ids[0], by="alice")
    rejected = hypha.reject(ids[1], by="bob", reason="no")
    (a,) = [e.data for e in hypha.store.events(ids[0]) if e.kind == "human.review.approved"]
    (r,) = [e.data for e in hypha.store.events(ids[1]) if e.kind == "human.review.rejected"]
    assert isinstance(a["at"], float) and isinstance(r["at"], float)
    assert list(a.items()) == [("review_id", approved), ("by", "alice"), ("note", ""),
                               ("at", a["at"])]  # key order too
    assert list(r.items()) == [("review_id", rejected), ("by", "bob"), ("reason", "no"),
                               ("at", r["at"])]


def test_review_parks_the_run_then_approval_resumes_it(hypha: Hypha) -> None:
    run = hypha.start("triage", {"text": "refund please", "order": "A-1"})
    wait_until(lambda: run.status().status == "waiting_human")
    (pending,) = [r for r in hypha.reviews() if r.run_id == run.id]
    assert (pending.run_id, pending.reason) == (run.id, "refund")
    assert pending.subject == {"workflow": "triage", "from": "Route", "to": "Refund"}
    rejected = kinds(run, "fsm.transition.rejected")
    assert [(d["to"], d["reason"]) for d in rejected] == [("Refund", "human_review_required")]
    assert hypha.store.get(run.id)["fsm"]["state"] == "HumanReview"
    assert hypha.approve(run.id, by="alice") == pending.review_id
    assert run.wait(WAIT) == "refunded A-1"
    assert hypha.store.get(run.id)["fsm"]["path"] == [
        "Intake", "Route", "HumanReview", "Refund", "Done"]
    with pytest.raises(NoPendingReview):
        hypha.approve(run.id, by="alice")
    assert [d["by"] for d in kinds(run, "human.review.approved")] == ["alice"]
    assert_well_formed(run)


def test_rejection_ends_the_run_failed_review_rejected(hypha: Hypha) -> None:
    run = hypha.start("triage", {"text": "refund now", "order": "B-2"})
    wait_until(lambda: run.status().status == "waiting_human")
    hypha.reject(run.id, by="bob", reason="not eligible")
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "review_rejected"
    assert hypha.store.get(run.id)["fsm"]["state"] == "Failed"
    assert not [r for r in hypha.reviews() if r.run_id == run.id]
    assert_well_formed(run)


def test_a_review_expires_in_the_supervisors_sweep(store_url: str) -> None:
    doc = {**TRIAGE, "states": [
        *(s for s in TRIAGE["states"] if s["id"] != "Refund"),
        {"id": "Refund", "node": "refund",
         "human_review": {"required": True, "expires_in": 30}}]}
    with running(store_url) as hypha:
        hypha.register(workflow_graph(Fsm(WorkflowSpec.model_validate(doc), NODES), NODES))
        run = hypha.start("triage", {"text": "refund", "order": "C-3"})
        wait_until(lambda: run.status().status == "waiting_human")
        assert not [d for d in sweep(hypha._rt) if d.get("run_id") == run.id]
        decisions = sweep(hypha._rt, now=time.time() + 31)  # (PostgreSQL: a shared database)
        assert [d["action"] for d in decisions if d.get("run_id") == run.id] == ["review_expired"]
        with pytest.raises(RunFailed) as info:
            run.wait(WAIT)
        assert info.value.reason == "review_expired"


def test_no_guard_holding_is_a_typed_failure(hypha: Hypha) -> None:
    run = hypha.start("triage", {"text": "hello"})  # intent "unknown": no route
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "transition_rejected"
    (rejected,) = kinds(run, "fsm.transition.rejected")
    assert (rejected["from"], rejected["reason"]) == ("Route", "guard_rejected")
    assert hypha.store.get(run.id)["fsm"]["path"][-1] == "Failed"


def test_a_failing_node_ends_in_failed(store_url: str) -> None:
    def boom(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        raise ValueError("no classifier today")

    nodes = {**NODES, "classify": boom}
    with running(store_url) as hypha:
        hypha.register(workflow_graph(Fsm(WorkflowSpec.model_validate(TRIAGE), nodes), nodes))
        run = hypha.start("triage", {"text": "x"})
        with pytest.raises(RunFailed) as info:
            run.wait(WAIT)
        assert info.value.reason == "node_failed"
        assert "no classifier today" in str(info.value)
        assert hypha.store.get(run.id)["fsm"]["path"] == ["Intake", "Failed"]


def test_a_workflow_run_re_executes_against_its_own_code(hypha: Hypha) -> None:
    from hypha_celery.rerun import rerun

    run = hypha.start("triage", {"text": "refund", "order": "D-4"})
    wait_until(lambda: run.status().status == "waiting_human")
    hypha.approve(run.id, by="carol")
    run.wait(WAIT)
    graph = workflow_graph(Fsm(WorkflowSpec.model_validate(TRIAGE), NODES), NODES)
    report = rerun(graph, hypha.store.events(run.id))
    assert report.ok, report.divergence
