"""A support agent: classify -> lookups in parallel -> merge -> answer.

Run workers and start runs with the same module (the broker and the store come
from HYPHA_BROKER_URL / HYPHA_STORE_URL)::

    hypha worker --app examples.support:hypha
    celery -A examples.support worker -E           # plain Celery works as well
    hypha run support --app examples.support:hypha --input '{"question": "hi"}' --wait

The nodes are mocks (no LLM). The input may carry ``"latency"``: seconds each
lookup pretends to take, to watch a slow run or cancel one.
"""

from __future__ import annotations

import time
from typing import Any

from hypha_celery import FanOut, Finish, Graph, Hypha, Next
from hypha_celery.graph import Context, Outcome

SOURCES = ("faq", "tickets", "wiki")
TOPICS = {"charge": "billing", "refund": "billing", "password": "account", "login": "account"}


def classify(state: dict[str, Any], input: Any) -> dict[str, Any]:
    question = input.get("question") if isinstance(input, dict) else None
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the input needs a non-empty 'question'")
    topic = next((t for word, t in TOPICS.items() if word in question.lower()), "general")
    return {"topic": topic, "latency": float(input.get("latency", 0.0))}


def lookup(state: dict[str, Any], source: str) -> dict[str, Any]:
    time.sleep(state["latency"])
    return {"source": source, "hits": len(source)}


def merge(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
    """Outcomes arrive in declaration order; a failed lookup is left out."""
    return {"docs": [o.value for o in outcomes if o.ok]}


def answer(state: dict[str, Any], input: Any) -> dict[str, Any]:
    hits = sum(doc["hits"] for doc in state["docs"])
    return {"answer": f"{state['topic']}: {hits} hits"}


def policy(ctx: Context) -> Next | FanOut | Finish:
    if ctx.step == 0:
        return Next("classify", ctx.input)
    if ctx.step == 1:
        return FanOut([Next("lookup", source) for source in SOURCES], reducer="merge")
    if ctx.step == 2:
        return Next("answer")
    return Finish({"answer": ctx.state["answer"], "sources": [d["source"] for d in
                                                              ctx.state["docs"]]})


hypha = Hypha.from_env()
hypha.register(Graph(
    id="support",
    nodes={"classify": classify, "lookup": lookup, "answer": answer},
    reducers={"merge": merge},
    decision_policy=policy,
    max_steps=10, execution_timeout=60.0, node_timeout=20.0,
))

#: ``celery -A examples.support worker`` finds the Celery app here.
celery = hypha.celery
