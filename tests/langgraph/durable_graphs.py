"""The LangGraph programs of the durability tests (``test_durable.py``), as uncompiled
``StateGraph`` s: the test compiles each with LangGraph's ``InMemorySaver`` (the
reference) and distributes it on hypha; the worker (:mod:`tests.langgraph.durable_app`)
distributes the same builders with the same node options.

Side channel: in a worker process (``HYPHA_RESULT_BACKEND`` set), each node function
counts each time it really runs (Redis ``HINCRBY`` of :data:`RUNS`, field
``<tag>:<node>``; ``tag`` is a field of the graph's state, one per test run), so a test
can tell which node ran again after its worker was killed. In the test process (the
reference run, no such variable) nothing is counted. A node is slow (it sleeps
:data:`SLOW_S`) on its first call only, when the state names it as ``slow``: long enough
to be killed mid-call, quick when it runs again.
"""

from __future__ import annotations

import operator
import os
import time
from collections.abc import Callable
from typing import Annotated, Any

import redis
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

#: Redis hash of the node runs: ``<tag>:<node>`` -> how many times the function ran.
RUNS = "lg-durable:runs"
#: How long a slow node sleeps on its first call (within :data:`NODE_TIMEOUT`).
SLOW_S = 2.0
#: Every node's timeout (``distribute(nodes=)``): it sets how soon the supervisor
#: re-drives a lost node (hard limit ``timeout + 5 s`` plus the grace).
NODE_TIMEOUT = 3.0
#: How long each node of the thread graph takes (two runs overlapping would show).
THREAD_STEP_S = 0.3

_clients: dict[str, redis.Redis] = {}


def side_channel() -> redis.Redis | None:
    """The worker's Redis (its result backend); None in the test process."""
    url = os.environ.get("HYPHA_RESULT_BACKEND")
    if not url:
        return None
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url)
    return _clients[url]


def count(tag: str, node: str) -> int:
    """Count one call of ``node`` for the run tagged ``tag``: the calls so far (1 in
    the test process, where nothing is counted)."""
    side = side_channel()
    return 1 if side is None else int(side.hincrby(RUNS, f"{tag}:{node}", 1))


class Pipeline(TypedDict):
    tag: str
    slow: str
    text: str
    items: Annotated[list[str], operator.add]


def _step(name: str) -> Callable[[Pipeline], dict[str, Any]]:
    def node(state: Pipeline) -> dict[str, Any]:
        calls = count(state["tag"], name)
        if state["slow"] == name and calls == 1:
            time.sleep(SLOW_S)
        if name in ("left", "right"):
            return {"items": [f"{name}:{state['text']}"]}
        return {"text": f"{state['text']}>{name}", "items": [name]}
    node.__name__ = name
    return node


def pipeline() -> Any:
    """``prep`` -> ``work`` -> ``left`` and ``right`` in one superstep -> ``merge``:
    a linear part and a parallel part (a chord on hypha)."""
    b = StateGraph(Pipeline)
    for n in ("prep", "work", "left", "right", "merge"):
        b.add_node(n, _step(n))
    b.add_edge(START, "prep")
    b.add_edge("prep", "work")
    b.add_edge("work", "left")
    b.add_edge("work", "right")
    b.add_edge(["left", "right"], "merge")
    b.add_edge("merge", END)
    return b


class Payment(TypedDict):
    tag: str
    amount: int
    log: Annotated[list[str], operator.add]


def _quote(state: Payment) -> dict[str, Any]:
    count(state["tag"], "quote")
    return {"log": [f"quote {state['amount']}"]}


def _charge(state: Payment) -> dict[str, Any]:
    """The external effect: slow on its first call (its worker is killed there)."""
    if count(state["tag"], "charge") == 1:
        time.sleep(SLOW_S)
    return {"log": [f"charged {state['amount']}"]}


def _receipt(state: Payment) -> dict[str, Any]:
    count(state["tag"], "receipt")
    return {"log": ["receipt"]}


def payment() -> Any:
    """``quote`` -> ``charge`` (at most once on hypha) -> ``receipt``."""
    b = StateGraph(Payment)
    b.add_node("quote", _quote)
    b.add_node("charge", _charge)
    b.add_node("receipt", _receipt)
    b.add_edge(START, "quote")
    b.add_edge("quote", "charge")
    b.add_edge("charge", "receipt")
    b.add_edge("receipt", END)
    return b


class Conversation(TypedDict):
    turn: str
    log: Annotated[list[str], operator.add]


def _turn(name: str) -> Callable[[Conversation], dict[str, Any]]:
    def node(state: Conversation) -> dict[str, Any]:
        time.sleep(THREAD_STEP_S)
        return {"log": [f"{state['turn']}:{name}:{len(state['log'])}"]}
    node.__name__ = name
    return node


def conversation() -> Any:
    """``hear`` -> ``think`` and ``note`` in one superstep: each write depends on how
    long the thread's log already is, so a run that did not see the one before it
    gives other values."""
    b = StateGraph(Conversation)
    for n in ("hear", "think", "note"):
        b.add_node(n, _turn(n))
    b.add_edge(START, "hear")
    b.add_edge("hear", "think")
    b.add_edge("hear", "note")
    b.add_edge("think", END)
    b.add_edge("note", END)
    return b


BUILDERS: dict[str, Callable[[], Any]] = {
    "lgd_pipeline": pipeline,
    "lgd_payment": payment,
    "lgd_conversation": conversation,
}


def options(gid: str) -> dict[str, dict[str, Any]]:
    """The hypha Node options of each LangGraph node of ``gid`` (``distribute(nodes=)``):
    a short timeout everywhere (a quick re-drive); ``charge`` at most once."""
    names = [n for n in BUILDERS[gid]().nodes]
    out: dict[str, dict[str, Any]] = {n: {"timeout": NODE_TIMEOUT} for n in names}
    if gid == "lgd_payment":
        out["charge"]["side_effect"] = "external_effect"
    return out


def distribute_all(hypha: Any) -> dict[str, Any]:
    """Every graph of :data:`BUILDERS` distributed on ``hypha`` with its options."""
    from hypha_celery.langgraph import distribute

    return {gid: distribute(build(), hypha, id=gid, nodes=options(gid))
            for gid, build in BUILDERS.items()}


__all__ = ["BUILDERS", "NODE_TIMEOUT", "RUNS", "SLOW_S", "count", "distribute_all", "options"]
