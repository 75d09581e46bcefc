"""Local steps: the task that ran a step (or the kickoff) runs the next fast node
itself, but only while the task's soft time limit still enforces that node's timeout."""

from __future__ import annotations

from typing import Any

from hypha_celery import Context, Finish, Graph, Hypha, Next, Node, Settings
from tests.runtime.support import WAIT


def chain_of(*nodes: str) -> Any:
    def policy(ctx: Context) -> Next | Finish:
        return Next(nodes[ctx.step]) if ctx.step < len(nodes) else Finish(ctx.state)
    return policy


def fast(name: str) -> Any:
    return lambda state, inp: {name: True}


def test_the_kickoff_runs_fast_nodes_locally(sqlite_url: str, published: list[str]) -> None:
    """A budget no run of three no-op nodes can spend, so the test does not depend on the
    speed of the machine (the default 50 ms can pass in a GC pause of a long session)."""
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=True, local_budget=5.0))
    try:
        hypha.register(Graph("l1", {n: fast(n) for n in "abc"}, chain_of("a", "b", "c")))
        run = hypha.start("l1")
        assert run.wait(WAIT) == {"a": True, "b": True, "c": True}
        events = run.events()
    finally:
        hypha.close()
    assert published == ["hypha.coordinator"]  # the kickoff; no node message at all
    workers = {e.data["worker"] for e in events if e.kind == "node.execution.started"}
    assert len(workers) == 1


def test_a_node_with_a_shorter_timeout_gets_its_own_task(hypha: Hypha,
                                                        published: list[str]) -> None:
    """Run inside a task whose soft limit is 10 s, a 1 s node would not be stopped at
    1 s: it is published as its own task (its own time limit) instead."""
    hypha.register(Graph("l2", {"a": Node(fast("a"), timeout=10), "b": Node(fast("b"), timeout=1)},
                         chain_of("a", "b")))
    run = hypha.start("l2")
    assert run.wait(WAIT) == {"a": True, "b": True}
    assert published == ["hypha.coordinator", "l2.b"]


def test_no_budget_publishes_every_step(sqlite_url: str, published: list[str]) -> None:
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=True, local_budget=0.0))
    try:
        hypha.register(Graph("l3", {n: fast(n) for n in "ab"}, chain_of("a", "b")))
        run = hypha.start("l3")
        assert run.wait(WAIT) == {"a": True, "b": True}
    finally:
        hypha.close()
    assert published == ["hypha.coordinator", "l3.a", "l3.b"]
