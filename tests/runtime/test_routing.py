"""The decision policy routes the run: Next, FanOut, Finish, on the real runtime."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from hypha_celery import Context, FanOut, Finish, Graph, Hypha, Next, Outcome, RunFailed
from tests.runtime.support import WAIT, assert_well_formed, of_kind


def test_policy_routes_b_then_c_then_finishes(hypha: Hypha) -> None:
    calls: list[tuple[str, Any, dict[str, Any]]] = []
    contexts: list[Context] = []

    def node(name: str) -> Any:
        def fn(state: dict[str, Any], inp: Any) -> dict[str, Any]:
            calls.append((name, inp, dict(state)))
            return {name: inp["n"] * 10}
        return fn

    def policy(ctx: Context) -> Next | Finish:
        contexts.append(ctx)
        if ctx.step == 0:
            return Next("b", {"n": ctx.input["n"]})
        if ctx.step == 1:
            return Next("c", {"n": ctx.state["b"] + 1})
        return Finish({"b": ctx.state["b"], "c": ctx.state["c"]})

    hypha.register(Graph(id="route", nodes={"a": node("a"), "b": node("b"), "c": node("c")},
                         decision_policy=policy))
    run = hypha.start("route", {"n": 2}, user_id="u1", session_id="s1")
    assert run.wait(WAIT) == {"b": 20, "c": 210}

    assert calls == [("b", {"n": 2}, {}), ("c", {"n": 21}, {"b": 20})]
    assert [c.step for c in contexts] == [0, 1, 2]
    assert all(c.run_id == run.id and c.graph_id == "route" for c in contexts)
    assert all(c.input == {"n": 2} for c in contexts)
    assert all((c.user_id, c.session_id) == ("u1", "s1") for c in contexts)
    assert contexts[0].last is None
    assert [(c.last.node_id, c.last.ok, c.last.value) for c in contexts[1:]  # type: ignore[union-attr]
            ] == [("b", True, {"b": 20}), ("c", True, {"c": 210})]
    assert contexts[2].last.execution_id == f"{run.id}.2"  # type: ignore[union-attr]
    scheduled = [(e.data["node_id"], e.data["input"], e.data["step"], e.data["execution_id"])
                 for e in of_kind(run, "node.execution.scheduled")]
    assert scheduled == [("b", {"n": 2}, 1, f"{run.id}.1"), ("c", {"n": 21}, 2, f"{run.id}.2")]
    assert [e.data["type"] for e in of_kind(run, "decision.policy.recorded")] == [
        "next", "next", "finish"]
    status = run.status()
    assert (status.status, status.step, status.done, status.graph_id) == (
        "completed", 2, True, "route")
    assert_well_formed(run)


def test_policy_cannot_change_state_through_ctx(hypha: Hypha) -> None:
    seen: list[dict[str, Any]] = []
    node_saw: list[dict[str, Any]] = []

    def fill(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        node_saw.append(state)
        return {"items": [1], "nested": {"k": "v"}}

    def policy(ctx: Context) -> Next | Finish:
        seen.append(copy.deepcopy({"state": ctx.state, "input": ctx.input}))
        if ctx.step < 2:
            ctx.state.setdefault("items", []).append("mutated")
            ctx.state.setdefault("nested", {})["k"] = "mutated"
            ctx.state["extra"] = True
            ctx.input["q"] = "mutated"
            return Next("fill")
        return Finish(ctx.state)

    hypha.register(Graph(id="copy", nodes={"fill": fill}, decision_policy=policy))
    run = hypha.start("copy", {"q": "original"})
    assert run.wait(WAIT) == {"items": [1], "nested": {"k": "v"}}
    assert node_saw == [{}, {"items": [1], "nested": {"k": "v"}}]
    filled = {"items": [1], "nested": {"k": "v"}}
    assert seen == [{"state": {}, "input": {"q": "original"}},
                    {"state": filled, "input": {"q": "original"}},
                    {"state": filled, "input": {"q": "original"}}]
    assert hypha.store.get(run.id)["input"] == {"q": "original"}


def _edge_graph(spans: dict[int, tuple[float, float]], received: list[list[Outcome]],
                fail_fast: bool) -> Graph:
    def work(state: dict[str, Any], inp: dict[str, Any]) -> dict[str, Any]:
        began = time.monotonic()
        if inp.get("fail"):
            spans[inp["i"]] = (began, time.monotonic())
            raise ValueError(f"edge {inp['i']} failed")
        time.sleep(inp["sleep"])
        spans[inp["i"]] = (began, time.monotonic())
        return {f"r{inp['i']}": inp["i"]}

    def merge(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
        received.append(outcomes)
        if fail_fast and not all(o.ok for o in outcomes):
            raise RuntimeError("an edge failed")
        return {"merged": [o.value if o.ok else {"error": o.error.type}  # type: ignore[union-attr]
                           for o in outcomes]}

    def policy(ctx: Context) -> FanOut | Finish:
        if ctx.step == 0:
            return FanOut([Next("work", e) for e in ctx.input["edges"]], reducer="merge")
        return Finish(ctx.state)

    return Graph(id="fan", nodes={"work": work}, reducers={"merge": merge},
                 decision_policy=policy)


def test_fanout_outcomes_reach_reducer_in_declaration_order(hypha: Hypha) -> None:
    spans: dict[int, tuple[float, float]] = {}
    received: list[list[Outcome]] = []
    hypha.register(_edge_graph(spans, received, fail_fast=False))
    edges = [{"i": 0, "sleep": 0.3}, {"i": 1, "sleep": 0.01}, {"i": 2, "sleep": 0.1}]
    run = hypha.start("fan", {"edges": edges})
    result = run.wait(WAIT)

    assert result == {"merged": [{"r0": 0}, {"r1": 1}, {"r2": 2}]}  # edges only via reducer
    (outcomes,) = received
    assert [o.execution_id for o in outcomes] == [f"{run.id}.1.{i}" for i in range(3)]
    assert all(o.ok and o.node_id == "work" and o.error is None for o in outcomes)
    # they finished in another order than declared ...
    # (edge outcomes are logged with the reducer's step, once each, in declaration order)
    finished = [e.data["index"] for e in of_kind(run, "node.execution.completed")
                if e.data.get("edge_of")]
    assert finished == [0, 1, 2]
    assert sorted(spans, key=lambda i: spans[i][1]) == [1, 2, 0]
    # ... and ran at the same time
    assert max(b for b, _ in spans.values()) < min(e for _, e in spans.values())
    (fanout,) = of_kind(run, "node.fanout.scheduled")
    assert [e["execution_id"] for e in fanout.data["edges"]] == [
        f"{run.id}.1.{i}" for i in range(3)]
    kinds = [e.kind for e in run.events()]
    assert kinds.index("node.reducer.completed") > max(
        i for i, k in enumerate(kinds) if k == "node.execution.completed")
    assert_well_formed(run)


def test_failing_edge_still_lets_the_reducer_decide(hypha: Hypha) -> None:
    spans: dict[int, tuple[float, float]] = {}
    received: list[list[Outcome]] = []
    hypha.register(_edge_graph(spans, received, fail_fast=False))
    edges = [{"i": 0, "sleep": 0.05}, {"i": 1, "fail": True}, {"i": 2, "sleep": 0.0}]
    run = hypha.start("fan", {"edges": edges})
    assert run.wait(WAIT) == {"merged": [{"r0": 0}, {"error": "ValueError"}, {"r2": 2}]}
    (outcomes,) = received
    assert [o.ok for o in outcomes] == [True, False, True]
    assert outcomes[1].value is None and outcomes[1].error is not None
    assert outcomes[1].error.message == "edge 1 failed"
    (failed,) = of_kind(run, "node.execution.failed")
    assert failed.data["execution_id"] == f"{run.id}.1.1"
    assert_well_formed(run)


def test_fail_fast_reducer_ends_run_reducer_failed(hypha: Hypha) -> None:
    received: list[list[Outcome]] = []
    hypha.register(_edge_graph({}, received, fail_fast=True))
    edges = [{"i": 0, "sleep": 0.0}, {"i": 1, "fail": True}]
    run = hypha.start("fan", {"edges": edges})
    try:
        run.wait(WAIT)
    except RunFailed as exc:
        assert exc.reason == "reducer_failed" and exc.run_id == run.id
        assert "an edge failed" in exc.message
    else:
        raise AssertionError("the run should have failed")
    assert len(received) == 1
    (rf,) = of_kind(run, "node.reducer.failed")
    assert rf.data["error"]["type"] == "RuntimeError"
    (end,) = of_kind(run, "run.failed")
    assert end.data["reason"] == "reducer_failed"
    assert_well_formed(run)


def test_graph_registered_after_the_worker_started_runs(hypha: Hypha) -> None:
    def first(ctx: Context) -> Next | Finish:
        return Next("a") if ctx.step == 0 else Finish("first")

    hypha.register(Graph(id="first", nodes={"a": lambda s, i: {}}, decision_policy=first))
    assert hypha.start("first").wait(WAIT) == "first"

    where: list[str] = []

    def on_gpu(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        where.append(threading.current_thread().name)
        return {"gpu": True}

    def later(ctx: Context) -> Next | Finish:
        return Next("g") if ctx.step == 0 else Finish(ctx.state)

    from hypha_celery import Node

    hypha.register(Graph(id="later", nodes={"g": Node(on_gpu, queue="gpu")},
                         decision_policy=later))
    assert "gpu" in hypha.queues()
    assert hypha.start("later").wait(WAIT) == {"gpu": True}
    assert len(where) == 1
