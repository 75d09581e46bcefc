"""The graph of the cross-process tracing test that calls a tool and a model: ``ask``
searches (``ctx.tool``), then asks the model (``ctx.llm``, the fake model server whose URL
the worker gets in ``HYPHA_MODEL_BASE_URLS``). Registered by the client and the worker."""

from __future__ import annotations

from typing import Any

from hypha_celery import Finish, Graph, Next, Node

GRAPH_ID = "traced_calls"
MODEL = "openai:gpt-test"
TOOL = "search"


def ask(state: dict[str, Any], question: Any, ctx: Any) -> dict[str, Any]:
    hits = ctx.tool(TOOL, lambda args: ["doc-1"], {"q": question})
    answer = ctx.llm(MODEL, [{"role": "user", "content": str(question)}],
                     max_output_tokens=20)
    return {"hits": hits, "answer": answer.text}


def policy(ctx: Any) -> Next | Finish:
    return Next("ask", ctx.input) if ctx.step == 0 else Finish(ctx.state)


def calls_graph() -> Graph:
    return Graph(GRAPH_ID, {"ask": Node(ask, models=[MODEL], timeout=20.0)}, policy)
