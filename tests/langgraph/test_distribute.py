"""``distribute``'s own options, checked without a worker."""

from __future__ import annotations

from typing import Any

import pytest


def test_graph_options_reach_the_hypha_graph_and_its_own_are_refused(tmp_path: Any) -> None:
    """``distribute(graph=)`` sets the hypha graph's bounds (``__begin__``'s timeout is
    the graph's ``node_timeout``); the steps bound, node errors and retries stay the
    mapping's."""
    from hypha_celery import Hypha, Settings
    from hypha_celery.errors import GraphSpecError
    from hypha_celery.langgraph import distribute
    from tests.langgraph.graphs import linear

    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=f"sqlite:///{tmp_path}/s.db", embedded=True))
    try:
        distribute(linear(), hypha, id="opts",
                   graph={"node_timeout": 5.0, "max_state_bytes": 4096})
        registered = hypha.graphs["opts"]
        assert registered.timeout_for("__begin__") == 5.0
        assert registered.max_state_bytes == 4096
        with pytest.raises(GraphSpecError, match="max_steps"):
            distribute(linear(), hypha, id="opts2", graph={"max_steps": 3})
    finally:
        hypha.close()


def test_a_builder_langgraph_does_not_compile_fails_in_distribute_with_its_error(
        tmp_path: Any) -> None:
    """No entry point: ``compile()`` raises LangGraph's own ``ValueError``; nothing is
    registered."""
    from langgraph.graph import StateGraph
    from typing_extensions import TypedDict

    from hypha_celery import Hypha, Settings
    from hypha_celery.langgraph import distribute

    class State(TypedDict):
        n: int

    builder = StateGraph(State)
    builder.add_node("lonely", lambda s: {"n": 1})
    with pytest.raises(ValueError) as want:
        builder.compile()
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=f"sqlite:///{tmp_path}/s.db", embedded=True))
    try:
        with pytest.raises(ValueError) as got:
            distribute(builder, hypha, id="lonely")
        assert str(got.value) == str(want.value)
        assert "lonely" not in hypha.graphs
    finally:
        hypha.close()
