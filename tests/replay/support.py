"""Graphs and hand-built events for replay / evaluation tests.

The graphs run on the real embedded runtime. ``agent`` makes model and tool calls the
way a node's context records them (``model.call.*``, ``tool.policy.checked``,
``tool.call.*``, ``memory.read.completed``, payload shapes as fixed for the context API);
every node function goes through :data:`BEHAVIOUR`, so a test can swap in functions that
raise and prove replay never calls them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from hypha_celery import FanOut, Finish, Graph, Hypha, Next, NodeContext, RunFailed
from hypha_celery.events import Event
from hypha_celery.replay._record import record
from tests.runtime.support import running

#: A JSON Schema for the agent graph's output (hypha's answer contract).
ANSWER_CONTRACT: dict[str, Any] = {
    "type": "object",
    "required": ["answer"],
    "properties": {
        "answer": {"type": "string"},
        "citations": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": False,
}

T0 = 1_780_000_000.0


def ev(seq: int, type_: str, payload: dict[str, Any] | None = None, *, run_id: str = "run_replay",
       step: str | None = None, id: str | None = None, **fields: Any) -> Event:
    """A hand-built event (``id`` defaults to ``<run_id>:<seq>``)."""
    return Event(id=f"{run_id}:{seq}" if id is None else id, type=type_,
                 run_id=run_id, seq=seq, timestamp=T0 + seq, step_id=step,
                 payload=payload or {}, **fields)


def completed_run_events(run_id: str = "run_replay") -> list[Event]:
    """hypha's replay scenario in this runtime's taxonomy: a state path of two nodes, a
    checked and completed tool call, a memory read and a completed run."""
    return [
        ev(1, "run.started", {"execution_id": f"{run_id}.0"}, run_id=run_id),
        ev(2, "node.execution.scheduled", {"execution_id": f"{run_id}.1", "node_id": "intake",
                                           "step": 1, "input": "hello"}, run_id=run_id),
        ev(3, "tool.policy.checked", {"step": 1, "tool": "tool.search",
                                      "decision": {"allowed": True}}, run_id=run_id, step="1"),
        ev(4, "tool.call.completed", {"call_id": "c1", "execution_id": f"{run_id}.1", "step": 1,
                                      "node_id": "intake", "tool": "tool.search",
                                      "output": {"results": ["hypha"]}},
           run_id=run_id, step="1"),
        ev(5, "memory.read.completed", {"step": 1, "target": "working"}, run_id=run_id,
           step="1"),
        ev(6, "node.execution.scheduled", {"execution_id": f"{run_id}.2", "node_id": "completed",
                                           "step": 2, "input": None}, run_id=run_id),
        ev(7, "run.completed", {"result": {"answer": "ok"}}, run_id=run_id),
    ]


# -- graphs on the real runtime ------------------------------------------------------

def _support_classify(state: dict[str, Any], input: Any) -> dict[str, Any]:
    return {"topic": "billing"}


def _support_lookup(state: dict[str, Any], source: str) -> dict[str, Any]:
    return {"source": source, "hits": len(source)}


def _support_answer(state: dict[str, Any], input: Any) -> dict[str, Any]:
    return {"answer": f"{state['topic']}: {sum(d['hits'] for d in state['docs'])} hits"}


def _hash(value: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _step(ctx: NodeContext) -> int:
    return int(ctx.execution_id.split(".")[1])


def _call(hypha: Hypha, ctx: NodeContext, n: int) -> dict[str, Any]:
    return {"call_id": f"{ctx.execution_id}:{n}", "execution_id": ctx.execution_id,
            "step": _step(ctx), "node_id": ctx.node_id}


def _agent_plan(hypha: Hypha, state: dict[str, Any], input: Any, ctx: NodeContext
                ) -> dict[str, Any]:
    call = _call(hypha, ctx, 1)
    record(hypha.store, ctx.run_id, "model.call.started",
           {**call, "model": "mock-1", "request_hash": _hash(input)})
    plan = ["faq", "wiki"]
    record(hypha.store, ctx.run_id, "model.call.completed",
           {**call, "model": "mock-1", "output": {"plan": plan}})
    return {"plan": plan}


def _agent_search(hypha: Hypha, state: dict[str, Any], query: str, ctx: NodeContext
                  ) -> dict[str, Any]:
    call = _call(hypha, ctx, 1)
    step = _step(ctx)
    record(hypha.store, ctx.run_id, "tool.policy.checked",
           {"step": step, "tool": "search", "decision": {"allowed": True}})
    record(hypha.store, ctx.run_id, "tool.call.started",
           {**call, "tool": "search", "input_hash": _hash(query), "side_effect": "read"})
    record(hypha.store, ctx.run_id, "tool.call.completed",
           {**call, "tool": "search", "output": {"hits": [f"{query}-doc"]}})
    record(hypha.store, ctx.run_id, "memory.read.completed", {"step": step, "target": "working"})
    return {"hits": [f"{query}-doc"]}


def _agent_merge(state: dict[str, Any], outcomes: list[Any]) -> dict[str, Any]:
    return {"citations": sorted(h for o in outcomes if o.ok for h in o.value["hits"])}


#: node name -> the function the graph's node calls (tests swap these)
BEHAVIOUR: dict[str, Callable[..., Any]] = {}


def reset_behaviour() -> None:
    BEHAVIOUR.clear()
    BEHAVIOUR.update(classify=_support_classify, lookup=_support_lookup,
                     answer=_support_answer, plan=_agent_plan, search=_agent_search,
                     merge=_agent_merge)


reset_behaviour()


def support_graph(answer_suffix: str = "") -> Graph:
    """The README graph: classify -> 3 lookups in parallel -> merge -> answer."""

    def answer(state: dict[str, Any], input: Any) -> dict[str, Any]:
        out = BEHAVIOUR["answer"](state, input)
        return {"answer": out["answer"] + answer_suffix}

    def merge(state: dict[str, Any], outcomes: list[Any]) -> dict[str, Any]:
        return {"docs": [o.value for o in outcomes if o.ok]}

    def policy(ctx: Any) -> Any:
        if ctx.step == 0:
            return Next("classify", ctx.input)
        if ctx.step == 1:
            return FanOut([Next("lookup", s) for s in ("faq", "tickets", "wiki")],
                          reducer="merge")
        if ctx.step == 2:
            return Next("answer")
        return Finish(ctx.state["answer"])

    return Graph(id="support",
                 nodes={"classify": lambda s, i: BEHAVIOUR["classify"](s, i),
                        "lookup": lambda s, i: BEHAVIOUR["lookup"](s, i), "answer": answer},
                 reducers={"merge": merge}, decision_policy=policy)


def linear_graph(graph_id: str = "linear", answer: str = "ok", fail: bool = False) -> Graph:
    """classify -> answer, then Finish({"answer": ...}) (or a failing answer node)."""

    def respond(state: dict[str, Any], input: Any) -> dict[str, Any]:
        if fail:
            raise ValueError("no answer")
        return {"answer": answer}

    def policy(ctx: Any) -> Any:
        if ctx.step == 0:
            return Next("classify", ctx.input)
        if ctx.step == 1:
            return Next("respond")
        return Finish({"answer": ctx.state["answer"]})

    return Graph(id=graph_id,
                 nodes={"classify": lambda s, i: BEHAVIOUR["classify"](s, i),
                        "respond": respond},
                 decision_policy=policy)


def agent_graph(hypha: Hypha) -> Graph:
    """plan (a model call) -> search x2 in parallel (policy check, tool call, memory read)
    -> merge -> Finish({"answer", "citations"})."""

    def policy(ctx: Any) -> Any:
        if ctx.step == 0:
            return Next("plan", ctx.input)
        if ctx.step == 1:
            return FanOut([Next("search", q) for q in ctx.state["plan"]], reducer="merge")
        return Finish({"answer": "found", "citations": ctx.state["citations"]})

    return Graph(id="agent",
                 nodes={"plan": lambda s, i, ctx: BEHAVIOUR["plan"](hypha, s, i, ctx),
                        "search": lambda s, i, ctx: BEHAVIOUR["search"](hypha, s, i, ctx)},
                 reducers={"merge": lambda s, o: BEHAVIOUR["merge"](s, o)},
                 decision_policy=policy)


@contextmanager
def app(store_url: str, *graphs: Callable[[Hypha], Graph] | Graph) -> Iterator[Hypha]:
    """An embedded Hypha with ``graphs`` registered (a callable gets the Hypha)."""
    with running(store_url) as hypha:
        for g in graphs:
            hypha.register(g if isinstance(g, Graph) else g(hypha))
        yield hypha


def finished(hypha: Hypha, graph_id: str, input: Any = None) -> str:
    """Start a run of ``graph_id``, wait for it to end (any way), return its id."""
    run = hypha.start(graph_id, input)
    with suppress(RunFailed):  # a failing run is what some tests want
        run.wait(timeout=30)
    return run.id
