"""LangGraph, the anchor: bench ``linear``'s and ``fanout``'s workloads as LangGraph graphs.

``linear``: a ``StateGraph`` of ``STEPS`` (20) nodes in a row, each adding 1 to a counter
(hypha's ``bench_linear20`` visits one no-op node 20 times through its policy; 20 distinct
nodes joined by static edges is LangGraph's own way, and its cheapest). ``fanout``:
``Send("edge", i)`` for ``WIDTH`` (100) branches from ``START``, each returning ``[1]`` into
a list reduced with ``operator.add``, then one ``merge`` node counting them (LangGraph's
map-reduce idiom; a sync ``invoke`` runs the branches on its thread pool).

Each is compiled several ways (:func:`variants`), all in this process:

* ``memory``: no checkpointer;
* ``inmemorysaver``: ``InMemorySaver``;
* ``sqlite``: ``SqliteSaver`` on a temporary file;
* ``postgres``: ``PostgresSaver`` on a private database of the bench's PostgreSQL server;
* ``postgres_async``: the same with LangGraph's default ``durability="async"`` (a step's
  checkpoint is written while the next step runs).

Every checkpointer variant but ``postgres_async`` runs with ``durability="sync"``: a
step's checkpoint is written before the next step starts, the guarantee hypha (and DBOS)
give. Each invoke is a new thread (``thread_id``), as each hypha run is a new run.
"""

from __future__ import annotations

import operator
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, TypedDict

STEPS = 20
WIDTH = 100
PACKAGES = ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite",
            "langgraph-checkpoint-postgres")


class LinearState(TypedDict):
    n: int


class FanState(TypedDict, total=False):
    ok: Annotated[list[int], operator.add]
    total: int


def _inc(state: LinearState) -> dict[str, int]:
    return {"n": state["n"] + 1}


def _edge(state: Any) -> dict[str, list[int]]:  # state: the Send payload (an int)
    return {"ok": [1]}


def _merge(state: FanState) -> dict[str, int]:
    return {"total": len(state.get("ok", []))}


def linear_builder(steps: int = STEPS) -> Any:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(LinearState)
    names = [f"step{i}" for i in range(steps)]
    for name in names:
        builder.add_node(name, _inc)
    for a, b in zip([START, *names], [*names, END], strict=True):
        builder.add_edge(a, b)
    return builder


def fanout_builder(width: int = WIDTH) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    def branches(_: FanState) -> list[Any]:  # hints are evaluated: Send is local
        return [Send("edge", i) for i in range(width)]

    builder = StateGraph(FanState)
    builder.add_node("edge", _edge)
    builder.add_node("merge", _merge)
    builder.add_conditional_edges(START, branches, ["edge"])
    builder.add_edge("edge", "merge")
    builder.add_edge("merge", END)
    return builder


@dataclass(frozen=True)
class Variant:
    """One way of running LangGraph: its checkpointer and durability."""

    name: str
    checkpointer: Any
    durability: str | None

    def sampler(self, builder: Any, initial: dict[str, Any], check: Callable[[Any], bool],
                ) -> Callable[[], float]:
        """Wall time (s) of one ``invoke`` of ``builder``'s graph, on a new thread."""
        graph = builder.compile(checkpointer=self.checkpointer)

        def sample() -> float:
            config = {"configurable": {"thread_id": uuid.uuid4().hex}}
            kwargs = {"durability": self.durability} if self.durability else {}
            t0 = time.perf_counter()
            out = graph.invoke(dict(initial), config, **kwargs)
            dt = time.perf_counter() - t0
            if not check(out):
                raise RuntimeError(f"langgraph {self.name}: unexpected result {out!r}")
            return dt

        return sample


def variants(stack: ExitStack, pg_url: str) -> list[Variant]:
    """The variants, their resources closed by ``stack``. ``pg_url``: a libpq URL of a
    database of the bench's own (``postgresql://user@host:port/db``)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hypha-bench-lg-")))
    sqlite = stack.enter_context(SqliteSaver.from_conn_string(str(tmp / "checkpoints.db")))
    sqlite.setup()
    postgres = stack.enter_context(PostgresSaver.from_conn_string(pg_url))
    postgres.setup()
    return [Variant("memory", None, None), Variant("inmemorysaver", InMemorySaver(), "sync"),
            Variant("sqlite", sqlite, "sync"), Variant("postgres", postgres, "sync"),
            Variant("postgres_async", postgres, "async")]


def linear_check(out: Any) -> bool:
    return isinstance(out, dict) and out.get("n") == STEPS


def fanout_check(out: Any) -> bool:
    return isinstance(out, dict) and out.get("total") == WIDTH


def versions() -> dict[str, str | None]:
    import sqlite3

    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    found["sqlite"] = sqlite3.sqlite_version
    return found
