"""A graph whose nodes call a "model" and a "tool" through ``ctx``, in versions that
differ in one place each (for re-execution tests and ``hypha replay --against``)."""

from __future__ import annotations

from typing import Any

from hypha_celery import FanOut, Finish, Graph, Next, NodeContext
from hypha_celery.graph import Outcome

PROMPT = "PROMPT-TEXT-never-stored"
CALLED: list[str] = []  # what the "external" model and tool were asked, in this process


def llm(request: dict[str, Any]) -> dict[str, Any]:
    CALLED.append("llm")
    return {"text": f"topic:{len(request['prompt'])}"}


def search(args: dict[str, Any]) -> list[str]:
    CALLED.append("search")
    return [f"{args['q']}-hit-{i}" for i in range(2)]


def think(state: dict[str, Any], input: Any, ctx: NodeContext) -> dict[str, Any]:
    reply = ctx.model("small-llm", llm, {"prompt": PROMPT + str(input)})
    return {"topic": reply["text"]}


def lookup(state: dict[str, Any], source: str, ctx: NodeContext) -> dict[str, Any]:
    return {"hits": ctx.tool("search", search, {"q": source})}


def merge(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
    return {"docs": [h for o in outcomes if o.ok and o.value for h in o.value["hits"]]}


def policy(ctx: Any) -> Any:
    if ctx.step == 0:
        return Next("think", ctx.input)
    if ctx.step == 1:
        return FanOut([Next("lookup", s) for s in ("faq", "wiki")], reducer="merge")
    return Finish({"topic": ctx.state["topic"], "docs": len(ctx.state["docs"])})


def graph(**changes: Any) -> Graph:
    parts: dict[str, Any] = {"nodes": {"think": think, "lookup": lookup},
                             "reducers": {"merge": merge}, "policy": policy}
    parts.update(changes)
    return Graph("research", parts["nodes"], parts["policy"], reducers=parts["reducers"])


# versions for --against
same = graph()


def _asks_more(state: dict[str, Any], input: Any, ctx: NodeContext) -> dict[str, Any]:
    out = think(state, input, ctx)
    ctx.model("small-llm", llm, {"prompt": "and one more"})
    return out


more_calls = graph(nodes={"think": _asks_more, "lookup": lookup})
changed_output = graph(nodes={"think": lambda s, i, ctx: {"topic": "changed"},
                              "lookup": lookup})
