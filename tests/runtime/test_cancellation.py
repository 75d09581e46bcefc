"""Cancellation: one commit ends the run, node code sees ``ctx.cancelled()``, queued
node tasks are revoked, and a node that ignores the flag blocks nothing else."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from hypha_celery import Context, FanOut, Finish, Graph, Hypha, Next, NodeContext, RunCancelled
from hypha_celery.runtime import canvas
from tests.runtime.support import WAIT, assert_well_formed, of_kind, wait_until


def once(node: str) -> Any:
    def policy(ctx: Context) -> Next | Finish:
        return Next(node) if ctx.step == 0 else Finish(ctx.state)
    return policy


def test_node_code_sees_the_cooperative_flag(hypha: Hypha) -> None:
    entered, seen = threading.Event(), []

    def polite(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        entered.set()
        end = time.monotonic() + WAIT
        while not ctx.cancelled() and time.monotonic() < end:
            time.sleep(0.01)
        seen.append(ctx.cancelled())
        return {"stopped": True}

    hypha.register(Graph("c1", {"a": polite}, once("a")))
    run = hypha.start("c1")
    assert entered.wait(WAIT)
    started = time.monotonic()
    assert run.cancel()
    with pytest.raises(RunCancelled):
        run.wait(WAIT)
    wait_until(lambda: seen, what="the node to see the flag")
    assert seen == [True] and time.monotonic() - started < 2.0
    late = wait_until(lambda: of_kind(run, "node.execution.late_result"), what="the late result")
    assert late[0].data["reason"] == "cancelled"
    assert "stopped" not in hypha.store.get(run.id)["state"]
    assert_well_formed(run)


def test_cancel_revokes_the_awaited_tasks(hypha: Hypha, monkeypatch: pytest.MonkeyPatch) -> None:
    revoked: list[list[str]] = []
    monkeypatch.setattr(canvas, "revoke", lambda app, ids: revoked.append(list(ids)))
    gate, entered = threading.Event(), threading.Semaphore(0)

    def hold(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        entered.release()
        gate.wait(WAIT)
        return {}

    def policy(ctx: Context) -> FanOut | Finish:
        if ctx.step == 0:
            return FanOut([Next("h"), Next("h"), Next("h")], reducer="r")
        return Finish(None)

    hypha.register(Graph("c2", {"h": hold}, policy, {"r": lambda s, o: {}}))
    run = hypha.start("c2")
    assert entered.acquire(timeout=WAIT)
    try:
        assert run.cancel()
    finally:
        gate.set()
    assert revoked == [[f"{run.id}.1.0", f"{run.id}.1.1", f"{run.id}.1.2"]]
    (requested,) = of_kind(run, "run.cancel.requested")
    assert requested.data == {"revoked": revoked[0]}


def test_a_blocked_node_does_not_block_the_coordinator_or_other_runs(hypha: Hypha) -> None:
    gate, entered = threading.Event(), threading.Event()

    def deaf(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        entered.set()
        gate.wait(WAIT)  # sleeps; never checks ctx.cancelled()
        return {"deaf": True}

    hypha.register(Graph("c3", {"deaf": deaf}, once("deaf")))
    hypha.register(Graph("c4", {"quick": lambda s, i: {"quick": True}}, once("quick")))
    blocked = hypha.start("c3")
    assert entered.wait(WAIT)
    try:
        t0 = time.monotonic()
        assert blocked.cancel()
        with pytest.raises(RunCancelled):
            blocked.wait(WAIT)
        cancelled_after = time.monotonic() - t0
        others = [hypha.start("c4") for _ in range(5)]
        assert [r.wait(WAIT) for r in others] == [{"quick": True}] * 5
        assert not gate.is_set()  # all of it happened while the node was still blocked
    finally:
        gate.set()
    assert cancelled_after < 1.0
    late = wait_until(lambda: of_kind(blocked, "node.execution.late_result"),
                      what="the late result")
    assert late[0].data["reason"] == "cancelled"
    assert_well_formed(blocked)
