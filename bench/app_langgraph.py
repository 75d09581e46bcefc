"""``bench.app`` plus two LangGraph graphs run by hypha (``distribute``), for
``bench/langgraph.py``: the worker is started with ``-A bench.app_langgraph:celery`` (and
the io worker with ``--app bench.app_langgraph:hypha``), so both know them.

* ``lg_linear20``: :func:`bench.anchor_langgraph.linear_builder`, 20 nodes in a row;
* ``lg_send100``: ``Send("wait", i)`` for ``WIDTH`` (100) branches, each one chat
  completion request to ``BENCH_LG_IO_URL`` (the local model server, answering after
  200 ms), then ``merge``; the ``wait`` node is routed to ``hypha.io`` (the io worker's
  thread pool).
"""

from __future__ import annotations

import json
import operator
import os
import urllib.request
from typing import Annotated, Any, TypedDict

from bench.anchor_langgraph import linear_builder
from bench.app import add, celery, hypha
from hypha_celery.langgraph import distribute

WIDTH = 100
IO_QUEUE = "hypha.io"


class SendState(TypedDict, total=False):
    ok: Annotated[list[int], operator.add]
    total: int


_ASK = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "wait"}]})


def wait(_: Any) -> dict[str, list[int]]:
    """One chat completion that the model server answers after its delay (the node's
    I/O), over plain HTTP (no SDK in the node: both sides pay the same)."""
    request = urllib.request.Request(
        os.environ["BENCH_LG_IO_URL"] + "/v1/chat/completions", data=_ASK.encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-bench"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        json.loads(reply.read())
    return {"ok": [1]}


def merge(state: SendState) -> dict[str, int]:
    return {"total": len(state.get("ok", []))}


def send_builder(width: int = WIDTH) -> Any:
    """``START`` -> ``Send("wait", i)`` x ``width`` -> ``merge`` -> ``END``."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    def branches(_: SendState) -> list[Any]:
        return [Send("wait", i) for i in range(width)]

    builder: Any = StateGraph(SendState)  # the nodes take the Send payload (an int)
    builder.add_node("wait", wait)
    builder.add_node("merge", merge)
    builder.add_conditional_edges(START, branches, ["wait"])
    builder.add_edge("wait", "merge")
    builder.add_edge("merge", END)
    return builder


LINEAR = distribute(linear_builder(), hypha, id="lg_linear20")
SEND = distribute(send_builder(), hypha, id="lg_send100", nodes={"wait": {"queue": IO_QUEUE}})

__all__ = ["LINEAR", "SEND", "WIDTH", "add", "celery", "hypha", "send_builder"]
