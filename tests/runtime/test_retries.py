"""Retries, dead letters and circuit breakers on the real embedded runtime."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery import (
    Context,
    FanOut,
    Finish,
    Graph,
    Hypha,
    Next,
    Node,
    NodeContext,
    NotRedrivable,
    Outcome,
    RetryPolicy,
    RunFailed,
)
from hypha_celery.runtime.retries import Retries
from tests.runtime.support import WAIT, assert_well_formed, of_kind, wait_until

FAST = RetryPolicy(max_attempts=3, backoff=0.02, max_backoff=0.1)


def once(node: str = "a") -> Any:
    def policy(ctx: Context) -> Next | Finish:
        return Next(node, ctx.input) if ctx.step == 0 else Finish(ctx.state)
    return policy


class Flaky:
    """Fails with ``exc`` for the first ``failures`` attempts, then succeeds."""

    def __init__(self, failures: int, exc: type[Exception] = ConnectionError) -> None:
        self.failures, self.exc, self.attempts = failures, exc, []  # type: list[int]

    def __call__(self, state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        self.attempts.append(ctx.attempt)
        if len(self.attempts) <= self.failures:
            raise self.exc("flaky")
        return {"ok": ctx.attempt}


def test_a_transient_error_is_retried_with_one_event_per_attempt(hypha: Hypha) -> None:
    flaky = Flaky(2)
    hypha.register(Graph("r1", {"a": Node(flaky, retry=FAST)}, once()))
    run = hypha.start("r1")
    assert run.wait(WAIT) == {"ok": 3}
    assert flaky.attempts == [1, 2, 3]
    retrying = of_kind(run, "node.execution.retrying")
    eid = f"{run.id}.1"
    assert [(e.data["attempt"], e.data["delay"]) for e in retrying] == [
        (1, FAST.delay(eid, 1)), (2, FAST.delay(eid, 2))]
    assert {e.data["error"]["class"] for e in retrying} == {"transient"}
    # every attempt is in the log: its start, at its real time, before its retry
    assert [e.data["attempt"] for e in of_kind(run, "node.execution.started")] == [1, 2, 3]
    assert_well_formed(run)


def test_a_retried_attempts_calls_stay_in_the_log_under_their_own_ids(hypha: Hypha) -> None:
    seen: list[int] = []

    def node(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        seen.append(ctx.attempt)
        answer = ctx.model("m", lambda req: {"text": f"try {req['n']}"}, {"n": ctx.attempt})
        if ctx.attempt < 2:
            raise ConnectionError("flaky after the call")
        return {"answer": answer["text"]}

    hypha.register(Graph("r1c", {"a": Node(node, retry=FAST)}, once()))
    run = hypha.start("r1c")
    assert run.wait(WAIT) == {"answer": "try 2"}
    eid = f"{run.id}.1"
    done = of_kind(run, "model.call.completed")
    assert [(e.data["call_id"], e.data["attempt"], e.data["output"]) for e in done] == [
        (f"{eid}:m0", 1, {"text": "try 1"}), (f"{eid}:a2:m0", 2, {"text": "try 2"})]
    kinds = [e.kind for e in run.events()]
    assert kinds.index("model.call.completed") < kinds.index("node.execution.retrying")
    assert_well_formed(run)


def test_a_non_retryable_class_fails_at_once(hypha: Hypha) -> None:
    flaky = Flaky(5, ValueError)
    hypha.register(Graph("r2", {"a": Node(flaky, retry=FAST)}, once()))
    run = hypha.start("r2")
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "node_failed" and flaky.attempts == [1]
    assert not of_kind(run, "node.execution.retrying") and not of_kind(run,
                                                                       "node.execution.dead_lettered")
    (failed,) = of_kind(run, "node.execution.failed")
    assert failed.data["error"]["class"] == "validation"


def test_exhausted_retries_dead_letter_and_fail_the_run(hypha: Hypha) -> None:
    flaky = Flaky(9)
    hypha.register(Graph("r3", {"a": Node(flaky, retry=FAST)}, once()))
    run = hypha.start("r3", {"q": 1})
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "dead_lettered" and flaky.attempts == [1, 2, 3]
    (dl_event,) = of_kind(run, "node.execution.dead_lettered")
    (record,) = hypha.store.dead_letters(run_id=run.id)
    assert dl_event.data["dead_letter_id"] == record["id"]
    assert record["reason"] == "retries_exhausted" and record["attempts"] == 3
    assert record["error_class"] == "transient" and record["task"] == "r3.a"
    assert record["args"] == [{"run_id": run.id, "execution_id": f"{run.id}.1", "node_id": "a",
                               "input": {"q": 1}}]
    assert record["status"] == "open"
    with pytest.raises(NotRedrivable):  # the run ended: a redrive would be stale
        hypha.redrive(record["id"])
    assert_well_formed(run)


def test_the_policy_may_route_a_dead_letter_to_a_fallback(hypha: Hypha) -> None:
    seen: list[Outcome] = []

    def policy(ctx: Context) -> Next | Finish:
        if ctx.step == 0:
            return Next("a")
        if ctx.last is not None and not ctx.last.ok:
            seen.append(ctx.last)
            return Next("fallback")
        return Finish(ctx.state)

    hypha.register(Graph("r4", {"a": Node(Flaky(9), retry=FAST),
                                "fallback": lambda s, i: {"fallback": True}},
                         policy, on_node_error="policy"))
    run = hypha.start("r4")
    assert run.wait(WAIT) == {"fallback": True}
    (last,) = seen
    assert last.error is not None and last.error.dead_letter == "retries_exhausted"
    assert last.error.error_class == "transient" and last.error.type == "ConnectionError"


def test_a_parked_run_continues_after_a_redrive(hypha: Hypha) -> None:
    flaky = Flaky(3)  # fails all 3 attempts, succeeds on the redriven execution
    hypha.register(Graph("r5", {"a": Node(flaky, retry=FAST)}, once(), on_dead_letter="park"))
    run = hypha.start("r5", "x")
    wait_until(lambda: hypha.store.get(run.id)["status"] == "parked", what="parked")
    (record,) = hypha.store.dead_letters(run_id=run.id)
    assert hypha.store.get(run.id)["parked"]["dead_letter_id"] == record["id"]
    execution = hypha.redrive(record["id"])
    assert execution == f"{run.id}.1.r{record['id']}"
    assert run.wait(WAIT) == {"ok": 1}
    assert hypha.store.dead_letter(record["id"])["status"] == "redriven"  # type: ignore[index]
    assert [e.kind for e in run.events()][-5:] == [
        "run.redriven", "node.execution.started", "node.execution.completed",
        "decision.policy.recorded", "run.completed"]
    with pytest.raises(NotRedrivable):
        hypha.redrive(record["id"])
    assert_well_formed(run)


def test_an_edge_retries_inside_its_fanout(hypha: Hypha) -> None:
    flaky = Flaky(1)

    def policy(ctx: Context) -> FanOut | Finish:
        if ctx.step == 0:
            return FanOut([Next("a"), Next("b")], reducer="join")
        return Finish(ctx.state)

    def join(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
        return {"oks": [o.ok for o in outcomes]}

    hypha.register(Graph("r6", {"a": Node(flaky, retry=FAST), "b": lambda s, i: {"b": 1}},
                         policy, {"join": join}))
    run = hypha.start("r6")
    assert run.wait(WAIT) == {"oks": [True, True]}
    (retry,) = of_kind(run, "node.execution.retrying")
    assert retry.data["execution_id"] == f"{run.id}.1.0" and flaky.attempts == [1, 2]
    assert_well_formed(run)


def test_three_failures_open_the_circuit(hypha: Hypha, monkeypatch: pytest.MonkeyPatch) -> None:
    (retries,) = [m for m in hypha._rt.middleware.middleware if isinstance(m, Retries)]
    monkeypatch.setattr(retries, "reset", 0.3)
    policy = RetryPolicy(max_attempts=5, backoff=0.01, max_backoff=0.5)
    flaky = Flaky(3)
    hypha.register(Graph("r7", {"a": Node(flaky, retry=policy, dependency="llm")}, once()))
    run = hypha.start("r7")
    assert run.wait(WAIT) == {"ok": 4}
    (opened,) = of_kind(run, "recovery.circuit.opened")
    assert opened.data["key"] == "llm"
    third = [e for e in of_kind(run, "node.execution.retrying") if e.data["attempt"] == 3][0]
    assert third.data["delay"] >= 0.25  # waited for the reset, not the 0.04 s backoff
    assert hypha.store.circuit("llm")["failures"] == 0  # type: ignore[index]  # success closed it
