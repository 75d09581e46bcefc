"""Invalid graphs fail at definition time with GraphSpecError."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery import Context, FanOut, Finish, Graph, GraphSpecError, Next, Node, SpecError


def noop(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {}


def policy(ctx: Context) -> Finish:
    return Finish(None)


def merge(state: dict[str, Any], outcomes: list[Any]) -> dict[str, Any]:
    return {}


def build(**overrides: Any) -> Graph:
    spec: dict[str, Any] = {"id": "g", "nodes": {"a": noop}, "decision_policy": policy,
                            "reducers": {"merge": merge}}
    spec.update(overrides)
    return Graph(**spec)


def test_a_valid_graph_builds() -> None:
    g = build(nodes={"a": noop, "b": Node(noop, queue="gpu", timeout=2.0)}, max_steps=3,
              execution_timeout=5.0, node_timeout=1.0, on_node_error="policy")
    assert set(g.nodes) == {"a", "b"} and set(g.reducers) == {"merge"}
    assert g.timeout_for("a") == 1.0 and g.timeout_for("b") == 2.0
    assert (g.max_steps, g.execution_timeout, g.on_node_error) == (3, 5.0, "policy")
    assert isinstance(g.nodes["a"], Node) and g.nodes["b"].queue == "gpu"


@pytest.mark.parametrize("overrides", [
    pytest.param({"nodes": {}}, id="empty-nodes"),
    pytest.param({"nodes": None}, id="nodes-none"),
    pytest.param({"nodes": [noop]}, id="nodes-not-mapping"),
    pytest.param({"nodes": {"a": "not callable"}}, id="node-not-callable"),
    pytest.param({"decision_policy": None}, id="policy-none"),
    pytest.param({"decision_policy": "route"}, id="policy-not-callable"),
    pytest.param({"reducers": {"merge": 42}}, id="reducer-not-callable"),
    pytest.param({"reducers": {"a": merge}}, id="reducer-clashes-with-node"),
    pytest.param({"id": ""}, id="empty-graph-id"),
    pytest.param({"id": "sup.port"}, id="dot-in-graph-id"),
    pytest.param({"id": "has space"}, id="space-in-graph-id"),
    pytest.param({"id": 7}, id="graph-id-not-str"),
    pytest.param({"id": "x" * 65}, id="graph-id-too-long"),
    pytest.param({"nodes": {"a.b": noop}}, id="dot-in-node-id"),
    pytest.param({"nodes": {"1st": noop}}, id="node-id-starts-with-digit"),
    pytest.param({"nodes": {3: noop}}, id="node-id-not-str"),
    pytest.param({"reducers": {"me rge": merge}}, id="bad-reducer-name"),
    pytest.param({"max_steps": 0}, id="max-steps-zero"),
    pytest.param({"max_steps": -1}, id="max-steps-negative"),
    pytest.param({"execution_timeout": 0}, id="execution-timeout-zero"),
    pytest.param({"execution_timeout": -1.0}, id="execution-timeout-negative"),
    pytest.param({"node_timeout": -0.5}, id="node-timeout-negative"),
    pytest.param({"max_state_bytes": 0}, id="max-state-bytes-zero"),
    pytest.param({"on_node_error": "retry"}, id="unknown-on-node-error"),
])
def test_invalid_graph_raises_at_construction(overrides: dict[str, Any]) -> None:
    with pytest.raises(GraphSpecError):
        build(**overrides)


@pytest.mark.parametrize("kwargs", [{"timeout": -1.0}, {"timeout": 0}, {"queue": ""}])
def test_invalid_node_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(GraphSpecError):
        Node(noop, **kwargs)


def test_node_needs_a_callable() -> None:
    with pytest.raises(GraphSpecError):
        Node(None)  # type: ignore[arg-type]


def test_errors_are_spec_errors() -> None:
    with pytest.raises(SpecError) as info:
        build(max_steps=0)
    assert isinstance(info.value, TypeError)
    assert "max_steps" in str(info.value)


@pytest.mark.parametrize("kwargs", [
    pytest.param({"edges": [], "reducer": "merge"}, id="no-edges"),
    pytest.param({"edges": [Next("a")], "reducer": ""}, id="no-reducer"),
    pytest.param({"edges": [Next("a")]}, id="reducer-missing"),
    pytest.param({"edges": ["a"], "reducer": "merge"}, id="edge-not-next"),
])
def test_invalid_fanout(kwargs: dict[str, Any]) -> None:
    with pytest.raises(GraphSpecError):
        FanOut(**kwargs)


def test_decisions_serialize() -> None:
    fan = FanOut([Next("a", {"i": 0}), Next("b")], reducer="merge")
    assert fan.to_json() == {"type": "fanout", "reducer": "merge", "edges": [
        {"type": "next", "node_id": "a", "input": {"i": 0}},
        {"type": "next", "node_id": "b", "input": None}]}
    assert Finish({"r": 1}).to_json() == {"type": "finish", "result": {"r": 1}}
