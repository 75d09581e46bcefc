"""Stale results are fenced: a node finishing past its timeout, or after the run
was cancelled, records ``node.execution.late_result`` and changes nothing else."""

from __future__ import annotations

import threading
import time
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
    Outcome,
    RunCancelled,
    RunFailed,
)
from tests.runtime.support import WAIT, assert_well_formed, of_kind, wait_until


def slow(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    time.sleep(0.5)
    return {"late_value": True}


def test_result_after_node_timeout_is_late_and_not_merged(hypha: Hypha) -> None:
    lasts: list[Outcome | None] = []

    def policy(ctx: Context) -> Next | Finish:
        lasts.append(ctx.last)
        return Next("slow") if ctx.step == 0 else Finish(ctx.state)

    # the threads pool has no time limit: the node runs on past its 0.2 s
    hypha.register(Graph(id="late", nodes={"slow": Node(slow, timeout=0.2)},
                         decision_policy=policy, on_node_error="policy"))
    run = hypha.start("late")
    assert run.wait(WAIT) == {}
    (late,) = of_kind(run, "node.execution.late_result")
    assert late.data == {"execution_id": f"{run.id}.1", "node_id": "slow", "reason": "timeout"}
    assert not of_kind(run, "node.execution.completed")
    (failed,) = of_kind(run, "node.execution.failed")
    assert failed.data["error"]["type"] == "NodeTimeout" and "update" not in failed.data
    last = lasts[1]
    assert last is not None and not last.ok and last.value is None
    assert last.error is not None and last.error.type == "NodeTimeout"
    assert "late_value" not in hypha.store.get(run.id)["state"]
    assert_well_formed(run)


def test_node_timeout_with_fail_policy_ends_node_failed(hypha: Hypha) -> None:
    hypha.register(Graph(id="late", nodes={"slow": slow}, node_timeout=0.2,
                         decision_policy=lambda c: Next("slow") if c.step == 0 else Finish()))
    run = hypha.start("late")
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "node_failed" and "NodeTimeout" in info.value.message
    assert [e.data["reason"] for e in of_kind(run, "node.execution.late_result")] == ["timeout"]
    assert hypha.store.get(run.id)["state"] == {}


def _blocking_graph(entered: threading.Semaphore, gate: threading.Event,
                    done: list[str]) -> Graph:
    def hold(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        entered.release()
        gate.wait(WAIT)
        done.append(str(inp))
        return {f"held{inp}": True}

    def merge(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
        return {"merged": True}

    def policy(ctx: Context) -> Next | FanOut | Finish:
        if ctx.step == 0 and ctx.input == "fan":
            return FanOut([Next("hold", 0), Next("hold", 1)], reducer="merge")
        if ctx.step == 0:
            return Next("first")
        if ctx.step == 1 and ctx.input != "fan":
            return Next("hold", 9)
        return Finish(ctx.state)

    return Graph(id="block", nodes={"first": lambda s, i: {"first": True}, "hold": hold},
                 reducers={"merge": merge}, decision_policy=policy)


def test_cancel_while_a_node_runs(hypha: Hypha) -> None:
    entered, gate, done = threading.Semaphore(0), threading.Event(), []
    hypha.register(_blocking_graph(entered, gate, done))
    run = hypha.start("block", "single")
    assert entered.acquire(timeout=WAIT)
    assert run.cancel() is True
    with pytest.raises(RunCancelled) as info:
        run.wait(WAIT)
    assert isinstance(info.value, RunFailed) and info.value.reason == "cancelled"
    at_cancel = hypha.store.get(run.id)
    events_at_cancel = run.events()
    assert [e.kind for e in events_at_cancel][-2:] == ["run.cancel.requested", "run.cancelled"]

    gate.set()
    wait_until(lambda: of_kind(run, "node.execution.late_result"), what="the late result")
    assert done == ["9"]
    evs = run.events()
    assert evs[:len(events_at_cancel)] == events_at_cancel
    (late,) = evs[len(events_at_cancel):]
    assert late.kind == "node.execution.late_result"
    assert late.data == {"execution_id": f"{run.id}.2", "node_id": "hold", "reason": "cancelled"}
    after = hypha.store.get(run.id)
    ignore = ("seq", "updated_at")
    assert {k: v for k, v in after.items() if k not in ignore} == {
        k: v for k, v in at_cancel.items() if k not in ignore}
    assert after["state"] == {"first": True} and after["status"] == "cancelled"
    assert run.cancel() is False  # already ended: no second terminal event
    assert_well_formed(run)


def test_cancel_during_a_fanout_fences_every_edge(hypha: Hypha) -> None:
    entered, gate, done = threading.Semaphore(0), threading.Event(), []
    hypha.register(_blocking_graph(entered, gate, done))
    run = hypha.start("block", "fan")
    assert entered.acquire(timeout=WAIT) and entered.acquire(timeout=WAIT)  # both edges run
    assert run.cancel()
    with pytest.raises(RunCancelled):
        run.wait(WAIT)
    gate.set()
    wait_until(lambda: len(of_kind(run, "node.execution.late_result")) == 2,
               what="two late results")
    time.sleep(0.1)  # the (stale) reducer step must not add anything
    late = of_kind(run, "node.execution.late_result")
    assert sorted(e.data["execution_id"] for e in late) == [f"{run.id}.1.0", f"{run.id}.1.1"]
    assert {e.data["reason"] for e in late} == {"cancelled"}
    assert not of_kind(run, "node.reducer.completed") and not of_kind(run,
                                                                      "node.execution.completed")
    assert sorted(done) == ["0", "1"]
    assert hypha.store.get(run.id)["state"] == {}
    assert_well_formed(run)
