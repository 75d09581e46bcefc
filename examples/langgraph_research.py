"""A LangGraph research program run on hypha's Celery workers with ``distribute``.

The graph is plain LangGraph: ``plan`` splits a topic into questions; the next superstep
runs ``glossary`` beside one ``research`` task per question (a ``Send`` each: map), all
at once as one Celery chord; their notes meet in the ``notes`` channel through its
reducer (``operator.add``); ``write`` joins them into a report (reduce). The only
hypha lines are the import of ``distribute``, ``Hypha.from_env()`` and
``distribute(builder(), hypha, id="research")`` in place of ``builder().compile()``.

Run it here, with no server (embedded: a worker thread and SQLite in ``./.hypha/``)::

    python examples/langgraph_research.py "durable agents"

With a broker (``HYPHA_BROKER_URL``) an app module that calls :func:`app` at import,
``hypha = Hypha.from_env(); graph = app(hypha)``, is what ``hypha worker --app
myapp:hypha`` serves (docs/langgraph.md).
"""

from __future__ import annotations

import operator
import sys
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from hypha_celery import Hypha
from hypha_celery.langgraph import DistributedGraph, distribute

ANGLES = ("history", "failure modes", "tooling")


class Research(TypedDict):
    topic: str
    questions: list[str]
    notes: Annotated[list[str], operator.add]  # the reducer: every task's notes, appended
    report: str


class Question(TypedDict):
    question: str


def plan(state: Research) -> dict[str, Any]:
    return {"questions": [f"{state['topic']}: {angle}" for angle in ANGLES]}


def fan_out(state: Research) -> list[Send]:
    """Map: one ``research`` task per question, run in parallel."""
    return [Send("research", {"question": q}) for q in state["questions"]]


def research(state: Question) -> dict[str, Any]:
    return {"notes": [f"note on {state['question']}"]}


def glossary(state: Research) -> dict[str, Any]:
    return {"notes": [f"glossary of {state['topic']}"]}


def write(state: Research) -> dict[str, Any]:
    """Reduce: the notes of every task of the superstep, joined."""
    return {"report": f"{len(state['notes'])} notes: " + "; ".join(sorted(state["notes"]))}


def builder() -> StateGraph[Any]:
    """The LangGraph program, uncompiled (``builder().compile()`` runs it in process)."""
    b = StateGraph(Research)
    b.add_node("plan", plan)
    b.add_node("research", research)
    b.add_node("glossary", glossary)
    b.add_node("write", write)
    b.add_edge(START, "plan")
    b.add_conditional_edges("plan", fan_out, ["research"])
    b.add_edge("plan", "glossary")
    b.add_edge("research", "write")  # both run in one superstep: ``write`` runs once
    b.add_edge("glossary", "write")
    b.add_edge("write", END)
    return b


def app(hypha: Hypha) -> DistributedGraph:
    """The graph registered with ``hypha`` as ``research`` (call it where the app is
    defined, so every worker knows it)."""
    return distribute(builder(), hypha, id="research")


def run(graph: DistributedGraph, topic: str, thread: str = "research-1") -> dict[str, Any]:
    """One run of the graph on the thread ``thread``; the graph's final values."""
    config = {"configurable": {"thread_id": thread}}
    out: dict[str, Any] = graph.invoke({"topic": topic, "notes": []}, config, timeout=60)
    return out


def main() -> None:
    topic = sys.argv[1] if len(sys.argv) > 1 else "durable agents"
    hypha = Hypha.from_env()
    try:
        print(run(app(hypha), topic)["report"])
    finally:
        hypha.close()


if __name__ == "__main__":
    main()
