"""Every failure ends the run ``run.failed`` with a typed reason, and ``wait()``
raises RunFailed carrying it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph, Hypha, Next, RunFailed, RunTimeout
from tests.runtime.support import WAIT, assert_well_formed, of_kind


def ok(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1}


def always_next(ctx: Context) -> Next:
    return Next("a")


def once(node: str = "a") -> Callable[[Context], Next | Finish]:
    def policy(ctx: Context) -> Next | Finish:
        return Next(node) if ctx.step == 0 else Finish(ctx.state)
    return policy


def sleepy(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    time.sleep(0.6)
    return {"slept": True}


def returns(value: Any) -> Callable[[dict[str, Any], Any], Any]:
    return lambda state, inp: value


def raises(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    raise ConnectionError("backend down")


def policy_raises(ctx: Context) -> Next:
    raise KeyError("missing")


@dataclass
class Case:
    reason: str
    nodes: dict[str, Any]
    policy: Callable[[Context], Any]
    options: dict[str, Any] = field(default_factory=dict)
    exc: type[RunFailed] = RunFailed


CASES = {
    "max_steps": Case("max_steps_exceeded", {"a": ok}, always_next, {"max_steps": 3}),
    "deadline": Case("deadline_exceeded", {"a": sleepy}, once(), {"execution_timeout": 0.3},
                     RunTimeout),
    "unknown_node": Case("unknown_node", {"a": ok}, once("nowhere")),
    "state_set": Case("invalid_state", {"a": returns({"tags": {"x", "y"}})}, once()),
    "state_object": Case("invalid_state", {"a": returns({"obj": object()})}, once()),
    "output_not_dict": Case("invalid_state", {"a": returns({"x", "y"})}, once()),
    "state_even_with_policy": Case("invalid_state", {"a": returns({"x": {1}})}, once(),
                                   {"on_node_error": "policy"}),
    "policy_error": Case("policy_error", {"a": ok}, policy_raises),
    "node_failed": Case("node_failed", {"a": raises}, once()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_failure_reason(hypha: Hypha, name: str) -> None:
    case = CASES[name]
    hypha.register(Graph(id="fails", nodes=case.nodes, decision_policy=case.policy,
                         **case.options))
    run = hypha.start("fails", {"q": 1})
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    exc = info.value
    assert type(exc) is case.exc
    assert (exc.run_id, exc.reason) == (run.id, case.reason)
    (end,) = of_kind(run, "run.failed")
    assert end.data["reason"] == case.reason
    assert run.status().status == "failed"
    assert run.status().error == {"reason": case.reason, "message": end.data["message"]}
    assert exc.message == end.data["message"]
    assert_well_formed(run)
    if name == "max_steps":
        scheduled = of_kind(run, "node.execution.scheduled")
        assert [e.data["step"] for e in scheduled] == [1, 2, 3]  # exactly max_steps, no 4th
        assert len(of_kind(run, "node.execution.completed")) == 3
        assert "max_steps=3" in exc.message
    if case.reason == "invalid_state":
        assert of_kind(run, "node.execution.failed")[0].data["error"]["type"] in (
            "InvalidState", "InvalidNodeOutput")
        assert run.status().step == 1 and hypha.store.get(run.id)["state"] == {}
    if name == "policy_error":
        assert "KeyError" in exc.message and not of_kind(run, "node.execution.scheduled")
    if name == "node_failed":
        assert "ConnectionError: backend down" in exc.message
    if name == "unknown_node":
        assert "nowhere" in exc.message and not of_kind(run, "node.execution.scheduled")


def test_on_node_error_policy_routes_to_a_fallback(hypha: Hypha) -> None:
    lasts: list[Any] = []

    def policy(ctx: Context) -> Next | Finish:
        lasts.append(ctx.last)
        if ctx.step == 0:
            return Next("primary", {"q": ctx.input["q"]})
        if ctx.step == 1 and ctx.last is not None and not ctx.last.ok:
            return Next("fallback", {"why": ctx.last.error.type})  # type: ignore[union-attr]
        return Finish(ctx.state)

    hypha.register(Graph(id="fb", nodes={"primary": raises,
                                         "fallback": lambda s, i: {"answer": i["why"]}},
                         decision_policy=policy, on_node_error="policy"))
    run = hypha.start("fb", {"q": "?"})
    assert run.wait(WAIT) == {"answer": "ConnectionError"}
    failed = lasts[1]
    assert (failed.node_id, failed.ok, failed.value) == ("primary", False, None)
    assert (failed.error.type, failed.error.message) == ("ConnectionError", "backend down")
    assert lasts[2].ok and lasts[2].node_id == "fallback"
    assert [e.kind for e in run.events() if e.kind.startswith("node.")] == [
        "node.execution.scheduled", "node.execution.started", "node.execution.failed",
        "node.execution.scheduled", "node.execution.started", "node.execution.completed"]
    assert_well_formed(run)


def test_unknown_reducer_and_bad_decisions(hypha: Hypha) -> None:
    from hypha_celery import FanOut

    def policy(ctx: Context) -> Any:
        kind = ctx.input["kind"]
        if kind == "reducer":
            return FanOut([Next("a")], reducer="nope")
        if kind == "type":
            return "a"
        if kind == "input":
            return Next("a", {1, 2})
        return Finish(object())

    hypha.register(Graph(id="bad", nodes={"a": ok}, decision_policy=policy))
    expected = {"reducer": "unknown_reducer", "type": "invalid_decision",
                "input": "invalid_decision", "result": "invalid_decision"}
    runs = {kind: hypha.start("bad", {"kind": kind}) for kind in expected}
    for kind, run in runs.items():
        with pytest.raises(RunFailed) as info:
            run.wait(WAIT)
        assert info.value.reason == expected[kind], kind
        assert not of_kind(run, "node.execution.scheduled")
        assert_well_formed(run)
