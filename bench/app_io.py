"""``bench.app`` plus ``bench_llm_noop``: the graph of ``bench_llm`` (one node declared to
call a model, so routed to ``hypha.io``) whose node makes no call. ``bench/graph_io.py``
runs both on the same workers: the io workers' CPU per run of one, less the other's, is
what the ``ctx.llm`` call itself costs."""

from __future__ import annotations

from typing import Any

from bench.app import LLM_MODEL, celery, hypha, llm_policy
from hypha_celery import Graph
from hypha_celery.graph import Node


def quiet_node(state: dict[str, Any], input: Any, ctx: Any) -> dict[str, Any]:
    return {"text": "ok"}


NOOP = hypha.register(Graph(id="bench_llm_noop",
                            nodes={"call": Node(quiet_node, models=[LLM_MODEL])},
                            decision_policy=llm_policy, execution_timeout=600.0,
                            node_timeout=300.0))

__all__ = ["NOOP", "celery", "hypha"]
