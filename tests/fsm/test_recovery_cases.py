"""Recovery cases of a workflow state on the real embedded runtime (SQLite and
PostgreSQL): each strategy, each limit, each way a case ends, quarantine, compensation
exactly once (and one that raises), and the specs refused at definition time."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Hypha, Node, NodeContext, RunFailed
from hypha_celery.errors import WorkflowSpecError
from hypha_celery.fsm import Fsm, StateRecovery, WorkflowSpec, workflow_graph
from hypha_celery.fsm.recovery import evidence_hash
from tests.runtime.support import WAIT, assert_well_formed, running, wait_until

#: Runs of each node, by (run_id, node).
CALLS: Counter[tuple[str, str]] = Counter()
_LOCK = threading.Lock()


class InvariantViolation(Exception):
    """The ledger does not add up: no strategy may touch it."""


def _count(ctx: NodeContext, node: str) -> int:
    with _LOCK:
        CALLS[(ctx.run_id, node)] += 1
        return CALLS[(ctx.run_id, node)]


def reserve(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
    _count(ctx, "reserve")
    return {"reserved": True}


def charge(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
    n, mode = _count(ctx, "charge"), inp.get("charge", "ok")
    if isinstance(mode, int) and n <= mode:  # fails its first ``mode`` runs
        raise ConnectionError("gateway down")
    if mode == "always":
        raise ConnectionError("gateway down")
    if mode == "varying":
        raise ConnectionError(f"gateway down (#{n})")
    if mode == "slow":
        time.sleep(0.2)
        raise ConnectionError(f"gateway slow (#{n})")
    if mode == "invalid":
        raise ValueError("card number malformed")
    if mode == "invariant" and n == 1:
        raise InvariantViolation("ledger total mismatch")
    return {"charged": "card"}


def backup(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
    _count(ctx, "backup")
    if inp.get("backup") == "fail":
        raise ConnectionError("backup gateway down")
    return {"charged": "backup"}


def charge_later(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
    _count(ctx, "charge_later")
    return {"charged": "deferred"}


def release(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
    _count(ctx, "release")
    if inp["input"].get("release") == "raise":
        raise RuntimeError("reservation api down")
    return {"released": inp["compensates"]}


def released(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any] | None:
    """The receipt: was the reservation released? (never, in these tests)"""
    return None


NODES: dict[str, Any] = {
    "reserve": reserve, "charge": charge, "backup": backup, "charge_later": charge_later,
    "release": Node(release, side_effect="external_effect", receipt=released)}


def booking(recovery: dict[str, Any] | None = None, **charge_state: Any) -> dict[str, Any]:
    charge_spec = {"id": "Charge", "node": "charge", "fallback": "Backup",
                   "degrade": "charge_later", "recovery": recovery or {}, **charge_state}
    return {"id": "booking", "initial_state": "Reserve", "terminal_states": ["Done"],
            "states": [{"id": "Reserve", "node": "reserve", "compensate": "release"},
                       charge_spec, {"id": "Backup", "node": "backup"}, {"id": "Done"}],
            "transitions": [{"from": "Reserve", "to": "Charge"}, {"from": "Charge", "to": "Done"},
                            {"from": "Backup", "to": "Done"}]}


def start(h: Hypha, spec: dict[str, Any], **inp: Any) -> Any:
    graph = workflow_graph(Fsm(WorkflowSpec.model_validate(spec), NODES), NODES, max_steps=40)
    h.register(graph)
    return h.start("booking", inp)


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    with running(store_url) as h:
        yield h


def events(run: Any, prefix: str) -> list[dict[str, Any]]:
    return [e.data for e in run.events() if e.kind.startswith(prefix)]


def case_kinds(run: Any) -> list[str]:
    return [e.kind.removeprefix("recovery.case.") for e in run.events()
            if e.kind.startswith("recovery.case.")]


def attempts(run: Any) -> list[tuple[str, int, str]]:
    return [(d["strategy"], d["attempt"], d["reason"])
            for d in events(run, "recovery.case.attempted")]


def waiting(run: Any) -> None:
    wait_until(lambda: run.status().status == "waiting_human")


def test_a_retry_resolves_the_case(hypha: Hypha) -> None:
    run = start(hypha, booking(), charge=1)
    assert run.wait(WAIT) == {"reserved": True, "charged": "card"}
    assert case_kinds(run) == ["opened", "attempted", "resolved"]
    (opened,) = events(run, "recovery.case.opened")
    assert opened["fingerprint"] == "Charge:charge:ConnectionError:transient"
    assert opened["error"] == {"type": "ConnectionError", "message": "gateway down",
                               "class": "transient"}
    assert (opened["strategies"], opened["max_cycles"], opened["max_no_progress_cycles"],
            opened["max_same_strategy"], opened["max_elapsed"]) == (
        ["retry", "fallback", "degrade", "escalate"], 8, 2, 2, 300.0)
    (resolved,) = events(run, "recovery.case.resolved")
    assert (resolved["status"], resolved["strategy"], resolved["cycles"]) == ("resolved",
                                                                               "retry", 1)
    view = hypha.store.get(run.id)
    assert view["fsm"]["path"] == ["Reserve", "Charge", "Recovering", "Charge", "Done"]
    assert view["fsm"]["case"]["status"] == "resolved" and view["fsm"]["cases"] == 1
    assert_well_formed(run)


def test_no_progress_moves_to_the_fallback_which_degrades_the_case(hypha: Hypha) -> None:
    run = start(hypha, booking(), charge="always")
    assert run.wait(WAIT)["charged"] == "backup"
    assert attempts(run) == [("retry", 1, "first"), ("retry", 2, "again"),
                             ("fallback", 1, "no_progress")]
    progress = [d["progress"] for d in events(run, "recovery.case.attempted")]
    assert progress == [True, False, False]  # the same fingerprint and evidence
    (resolved,) = events(run, "recovery.case.resolved")
    assert (resolved["status"], resolved["strategy"]) == ("degraded", "fallback")
    path = hypha.store.get(run.id)["fsm"]["path"]
    assert path[-3:] == ["Recovering", "Backup", "Done"]


def test_the_same_strategy_limit_moves_on_when_evidence_changes(hypha: Hypha) -> None:
    spec = booking({"strategies": ["retry", "degrade"], "max_same_strategy": 3})
    run = start(hypha, spec, charge="varying")
    assert run.wait(WAIT)["charged"] == "deferred"
    assert attempts(run) == [("retry", 1, "first"), ("retry", 2, "again"),
                             ("retry", 3, "again"), ("degrade", 1, "max_same_strategy")]
    assert all(d["progress"] for d in events(run, "recovery.case.attempted"))
    evidence = [d["evidence"] for d in events(run, "recovery.case.attempted")]
    assert len(set(evidence)) == 4
    (resolved,) = events(run, "recovery.case.resolved")
    assert (resolved["status"], resolved["strategy"]) == ("degraded", "degrade")
    assert CALLS[(run.id, "charge_later")] == 1


def test_exhausted_strategies_compensate_once_then_escalate(hypha: Hypha) -> None:
    spec = booking({"strategies": ["retry", "fallback", "escalate"]})
    run = start(hypha, spec, charge="always", backup="fail")
    waiting(run)
    assert case_kinds(run) == ["opened", "attempted", "attempted", "attempted", "attempted",
                               "compensation_started", "compensated", "escalated"]
    (escalated,) = events(run, "recovery.case.escalated")
    assert (escalated["reason"], escalated["cycles"], escalated["compensated"]) == (
        "max_same_strategy", 4, ["Reserve"])
    assert CALLS[(run.id, "release")] == 1
    view = hypha.store.get(run.id)
    assert view["fsm"]["state"] == "HumanReview"
    assert view["fsm"]["path"][-3:] == ["Backup", "Compensating", "HumanReview"]
    assert view["fsm"]["case"]["status"] == "escalated"
    hypha.reject(run.id, by="ops", reason="refund the customer")
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "review_rejected"
    assert CALLS[(run.id, "release")] == 1
    assert_well_formed(run)


def test_an_approved_escalation_resumes_the_failing_state(hypha: Hypha) -> None:
    spec = booking({"strategies": ["retry", "escalate"], "max_same_strategy": 1})
    run = start(hypha, spec, charge=2)  # fails twice, then works
    waiting(run)
    (escalated,) = events(run, "recovery.case.escalated")
    assert escalated["reason"] == "max_same_strategy"
    hypha.approve(run.id, by="ops")
    assert run.wait(WAIT)["charged"] == "card"
    path = hypha.store.get(run.id)["fsm"]["path"]
    assert path[-3:] == ["HumanReview", "Charge", "Done"]


def test_the_cycle_limit_escalates(hypha: Hypha) -> None:
    spec = booking({"strategies": ["retry", "escalate"], "max_cycles": 3,
                    "max_same_strategy": 10, "max_no_progress_cycles": 10})
    run = start(hypha, spec, charge="varying")
    waiting(run)
    assert len(attempts(run)) == 3
    (escalated,) = events(run, "recovery.case.escalated")
    assert (escalated["reason"], escalated["cycles"]) == ("max_cycles", 3)


def test_the_elapsed_limit_escalates(hypha: Hypha) -> None:
    spec = booking({"strategies": ["retry", "escalate"], "max_elapsed": 0.5,
                    "max_same_strategy": 50, "max_no_progress_cycles": 50, "max_cycles": 50})
    run = start(hypha, spec, charge="slow")
    waiting(run)
    (escalated,) = events(run, "recovery.case.escalated")
    assert escalated["reason"] == "max_elapsed"
    assert 1 <= escalated["cycles"] <= 4


def test_bad_input_escalates_at_once(hypha: Hypha) -> None:
    run = start(hypha, booking(), charge="invalid")
    waiting(run)
    assert case_kinds(run) == ["opened", "compensation_started", "compensated", "escalated"]
    (escalated,) = events(run, "recovery.case.escalated")
    assert (escalated["reason"], escalated["cycles"]) == ("not_retryable:validation", 0)


def test_a_compensation_that_raises_is_recorded_and_escalates(hypha: Hypha) -> None:
    run = start(hypha, booking(), charge="invalid", release="raise")
    waiting(run)
    assert case_kinds(run) == ["opened", "compensation_started", "escalated"]
    (escalated,) = events(run, "recovery.case.escalated")
    assert escalated["reason"] == "compensation_failed"
    assert escalated["error"] == {"type": "RuntimeError", "message": "reservation api down",
                                  "class": "unknown"}
    assert escalated["compensated"] == []
    assert hypha.store.get(run.id)["fsm"]["case"]["status"] == "escalated"
    hypha.reject(run.id, by="ops", reason="by hand")
    with pytest.raises(RunFailed):
        run.wait(WAIT)
    assert CALLS[(run.id, "release")] == 1
    assert_well_formed(run)


def test_an_invariant_violation_quarantines_until_released(hypha: Hypha) -> None:
    run = start(hypha, booking(), charge="invariant")
    waiting(run)
    assert case_kinds(run) == ["opened", "quarantined"]
    (quarantined,) = events(run, "recovery.case.quarantined")
    assert quarantined["reason"] == "invariant_violation"
    assert hypha.store.get(run.id)["fsm"]["state"] == "Quarantined"
    hypha.approve(run.id, by="ops")
    assert run.wait(WAIT)["charged"] == "card"
    path = hypha.store.get(run.id)["fsm"]["path"]
    assert path[-5:] == ["Charge", "Quarantined", "Recovering", "Charge", "Done"]
    assert CALLS[(run.id, "release")] == 0


def test_a_state_without_recovery_fails_as_before(hypha: Hypha) -> None:
    spec = booking()
    spec["states"][1] = {"id": "Charge", "node": "charge"}
    run = start(hypha, spec, charge="always")
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "node_failed"
    assert case_kinds(run) == []


def test_the_evidence_hash_is_stable_and_ignores_observed_at() -> None:
    a = evidence_hash({"fingerprint": "f", "message": "m", "observed_at": 1.0})
    assert a == evidence_hash({"message": "m", "fingerprint": "f", "observed_at": 2.0})
    assert a != evidence_hash({"fingerprint": "f", "message": "other"})
    assert len(a) == 16 and int(a, 16) >= 0


def test_the_defaults_are_hyphas() -> None:
    rec = StateRecovery()
    assert [s.value for s in rec.strategies] == ["retry", "fallback", "degrade", "escalate"]
    assert (rec.max_cycles, rec.max_no_progress_cycles, rec.max_same_strategy,
            rec.max_elapsed) == (8, 2, 2, 300.0)


@pytest.mark.parametrize(("change", "path", "message"), [
    ({"recovery": {"strategies": ["retry", "retry"]}}, "states[1].recovery.strategies",
     "listed twice"),
    ({"recovery": {"strategies": ["escalate", "retry"]}}, "states[1].recovery.strategies",
     "nothing can follow escalate"),
    ({"fallback": None}, "states[1].recovery.strategies", "needs the state's fallback"),
    ({"degrade": None}, "states[1].recovery.strategies", "needs the state's degrade"),
    ({"fallback": "Charge"}, "states[1].fallback", "not another work state"),
    ({"fallback": "Done"}, "states[1].fallback", "not another work state"),
    ({"fallback": "Nowhere"}, "states[1].fallback", "not another work state"),
    ({"degrade": "nothing"}, "states[1].degrade", "unknown node"),
    ({"compensate": "reserve"}, "states[1].compensate", "at most once, with a receipt"),
    ({"node": None}, "states[1].recovery", "runs no node to recover"),
    ({"recovery": None}, "states[1].fallback", "without recovery does nothing"),
])
def test_a_bad_recovery_is_refused_at_definition(change: dict[str, Any], path: str,
                                                  message: str) -> None:
    spec = booking()
    spec["states"][1] = {**spec["states"][1], **change}
    with pytest.raises(WorkflowSpecError) as info:
        Fsm(WorkflowSpec.model_validate(spec), NODES)
    assert any(p == path and message in m for p, m in info.value.problems), \
        info.value.problems


@pytest.mark.parametrize("recovery", [{"max_cycles": 0}, {"max_elapsed": 0},
                                      {"strategies": []}, {"strategies": ["reboot"]},
                                      {"max_same_strategy": 101}, {"unknown": 1}])
def test_out_of_range_limits_are_typed_errors(recovery: dict[str, Any]) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        WorkflowSpec.model_validate(booking(recovery))


def test_a_run_with_a_case_re_executes_against_its_own_code(hypha: Hypha) -> None:
    """The plan reads the clock of the events (``ctx.now``), not the wall clock: the same
    log gives the same decisions, however late it is re-executed."""
    from hypha_celery.rerun import rerun

    spec = booking({"max_elapsed": 5.0})
    run = start(hypha, spec, charge="always")
    run.wait(WAIT)
    time.sleep(0.1)
    graph = workflow_graph(Fsm(WorkflowSpec.model_validate(spec), NODES), NODES, max_steps=40)
    report = rerun(graph, hypha.store.events(run.id))
    assert report.ok, report.divergence
    (opened,) = events(run, "recovery.case.opened")
    failed = [e for e in run.events() if e.kind == "node.execution.failed"][0]
    assert opened["at"] >= failed.timestamp  # the time of the failure the decision saw


def test_only_states_the_run_moved_on_from_are_compensated() -> None:
    from hypha_celery.fsm._cases import committed

    assert committed(["Reserve", "Charge", "Recovering", "Charge", "Recovering", "Backup",
                      "Recovering", "Backup", "Compensating"]) == ["Reserve"]
    assert committed(["Intake", "Refund", "HumanReview", "Pay", "Done"]) == [
        "Intake", "Refund", "Pay"]  # a review between two states is no failure
    assert committed(["A", "Recovering", "A", "B", "C"]) == ["A", "B"]


def test_a_failed_fallback_state_is_not_compensated(hypha: Hypha) -> None:
    spec = booking({"strategies": ["fallback", "escalate"], "max_same_strategy": 1})
    spec["states"][2] = {"id": "Backup", "node": "backup", "compensate": "release"}
    run = start(hypha, spec, charge="always", backup="fail")
    waiting(run)
    assert [d["compensates"] for d in events(run, "recovery.case.compensated")] == ["Reserve"]
    assert CALLS[(run.id, "release")] == 1


def test_a_second_case_does_not_compensate_the_same_effect_again(hypha: Hypha) -> None:
    spec = booking({"strategies": ["retry", "escalate"], "max_same_strategy": 1})
    run = start(hypha, spec, charge="always")
    waiting(run)
    hypha.approve(run.id, by="ops")  # try Charge again: it fails again, a second case
    wait_until(lambda: len(events(run, "recovery.case.escalated")) == 2)
    assert [d["compensates"] for d in events(run, "recovery.case.compensated")] == ["Reserve"]
    assert CALLS[(run.id, "release")] == 1
    view = hypha.store.get(run.id)
    assert view["fsm"]["cases"] == 2 and view["fsm"]["compensated"] == ["Reserve"]
    assert [d["compensated"] for d in events(run, "recovery.case.escalated")] == [
        ["Reserve"], []]


def test_an_escalation_nobody_reviews_expires(store_url: str) -> None:
    from hypha_celery.beat.supervisor import sweep

    with running(store_url) as h:
        run = start(h, booking({"strategies": ["escalate"], "review_expires_in": 30}),
                    charge="always")
        waiting(run)
        (requested,) = events(run, "human.review.requested")
        assert requested["reason"] == "recovery case escalated: escalate"
        assert requested["subject"]["case_id"] == f"{run.id}:case:1"
        decisions = sweep(h._rt, now=time.time() + 31)  # (PostgreSQL: a shared database)
        assert [d["action"] for d in decisions if d.get("run_id") == run.id] == [
            "review_expired"]
        with pytest.raises(RunFailed) as info:
            run.wait(WAIT)
        assert info.value.reason == "review_expired"
        assert hypha_path(h, run.id)[-2:] == ["HumanReview", "Failed"]
        assert CALLS[(run.id, "release")] == 1


def hypha_path(h: Hypha, run_id: str) -> list[str]:
    return list(h.store.get(run_id)["fsm"]["path"])
