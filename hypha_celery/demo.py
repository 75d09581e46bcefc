"""The graph ``hypha demo`` runs: a support agent with mock nodes (no LLM).

classify -> three lookups in parallel (a chord) -> reducer ``merge`` -> answer
-> finish. Each node sleeps a few milliseconds to look like real work.
"""

from __future__ import annotations

import time
from typing import Any

from hypha_celery.client.hypha import Hypha
from hypha_celery.client.run import RunHandle
from hypha_celery.graph import Context, FanOut, Finish, Graph, Next, Outcome

GRAPH_ID = "support"
SOURCES = ("faq", "tickets", "wiki")
QUESTION = "Why was I charged twice this month?"
#: Pretend work per node, seconds (the whole demo stays well under a second).
WORK = 0.03

_TOPICS = {"charge": "billing", "invoice": "billing", "password": "account",
           "login": "account", "crash": "technical"}
_DOCS = {
    "faq": ["Duplicate charges are refunded within 5 days."],
    "tickets": ["#4711 double charge after plan change", "#4802 pending authorisation shown"],
    "wiki": ["Card authorisations look like charges until they settle."],
}


def classify(state: dict[str, Any], input: Any) -> dict[str, Any]:
    time.sleep(WORK)
    question = str((input or {}).get("question", "")).lower()
    topic = next((t for word, t in _TOPICS.items() if word in question), "general")
    return {"topic": topic}


def lookup(state: dict[str, Any], source: Any) -> dict[str, Any]:
    time.sleep(WORK)
    return {"source": source, "hits": _DOCS.get(str(source), [])}


def merge(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
    """Edge outcomes arrive in declaration order; failed edges are skipped."""
    docs = [o.value for o in outcomes if o.ok and o.value]
    return {"docs": docs}


def answer(state: dict[str, Any], input: Any) -> dict[str, Any]:
    time.sleep(WORK)
    hits = [hit for doc in state.get("docs", []) for hit in doc["hits"]]
    return {"answer": f"[{state['topic']}] {hits[0] if hits else 'No match found.'}",
            "sources": [doc["source"] for doc in state.get("docs", []) if doc["hits"]]}


def policy(ctx: Context) -> Next | FanOut | Finish:
    if ctx.step == 0:
        return Next("classify", ctx.input)
    if ctx.step == 1:
        return FanOut([Next("lookup", source) for source in SOURCES], reducer="merge")
    if ctx.step == 2:
        return Next("answer")
    return Finish({"topic": ctx.state["topic"], "answer": ctx.state["answer"],
                   "sources": ctx.state["sources"]})


def demo_graph() -> Graph:
    return Graph(
        id=GRAPH_ID,
        nodes={"classify": classify, "lookup": lookup, "answer": answer},
        reducers={"merge": merge},
        decision_policy=policy,
        max_steps=10, execution_timeout=30.0, node_timeout=10.0,
    )


def run_demo(
    hypha: Hypha, question: str = QUESTION, timeout: float = 30.0
) -> tuple[RunHandle, Any]:
    """Register the demo graph on ``hypha``, run it once; returns (run, result)."""
    if GRAPH_ID not in hypha.graphs:
        hypha.register(demo_graph())
    run = hypha.start(GRAPH_ID, {"question": question})
    return run, run.wait(timeout=timeout)
