"""Node, edge and reducer execution. Each returns an outcome envelope (a JSON
dict) and never raises into the canvas, so a failing edge cannot strand a chord.

Envelope keys: ``run_id``, ``execution_id``, ``node_id`` | ``reducer``, then
``update`` (ok) or ``error`` (``{type, message}``), ``duration``; edges add
``edge_of`` and ``index``; a result past its node timeout carries ``late``;
a task that found its execution no longer awaited returns ``stale``.
"""

from __future__ import annotations

import copy
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from hypha_celery.events.fold import View
from hypha_celery.graph import ErrorInfo, Graph, Outcome
from hypha_celery.runtime.core import Runtime
from hypha_celery.runtime.jsonsafe import error_json, is_json

Envelope = dict[str, Any]
_HOST = socket.gethostname()


def _worker() -> str:
    """``host:pid`` of the process running the node: read per call, because a
    prefork child imports this module in its parent, before the fork."""
    return f"{_HOST}:{os.getpid()}"


#: Error types that end the run whatever ``on_node_error`` says.
FATAL_ERRORS = frozenset({"InvalidState", "InvalidNodeOutput"})


def awaits(view: Mapping[str, Any] | None, execution_id: str) -> bool:
    return view is not None and view["status"] == "running" and view["waiting"] == execution_id


def run_node(
    rt: Runtime, graph: Graph, env: Envelope, attempt: int = 1
) -> tuple[Envelope | None, View | None]:
    """Run one node or edge execution; returns the outcome envelope (``None``: the
    run no longer awaits it) and the run view read before running (for the
    coordinator's optimistic write).

    Nothing is written before the node runs: ``node.started`` (with the real start
    time) is appended in the same transaction as the outcome — one commit per step.
    """
    run_id, execution_id = env["run_id"], env["execution_id"]
    if env.get("edge_of"):
        view, stored = rt.store.read_edge(run_id, f"{execution_id}:done")
        if stored is not None:
            return {"run_id": run_id, **stored}, None  # redelivered: not run again
    else:
        view = rt.store.read(run_id)
    if not awaits(view, env.get("edge_of") or execution_id):
        return None, None
    assert view is not None
    started = {"execution_id": execution_id, "node_id": env["node_id"], "attempt": attempt,
               "worker": _worker(), "at": time.time()}
    envelope = _execute(graph, env["node_id"], copy.deepcopy(view["state"]), env)
    envelope["started"] = started
    if env.get("edge_of"):
        return _record_edge(rt, envelope), None
    return envelope, view


def _execute(graph: Graph, node_id: str, state: dict[str, Any], env: Envelope) -> Envelope:
    out: Envelope = {"run_id": env["run_id"], "execution_id": env["execution_id"],
                     "node_id": node_id}
    if env.get("edge_of"):
        out["edge_of"] = env["edge_of"]
        out["index"] = env["index"]
    timeout = graph.timeout_for(node_id)
    started = time.monotonic()
    try:
        value = graph.nodes[node_id].fn(state, env.get("input"))
        out.update(_checked_update(value))
    except SoftTimeLimitExceeded:
        out["error"] = {"type": "NodeTimeout", "message": f"node ran past its {timeout}s timeout"}
    except Exception as exc:
        out["error"] = error_json(exc)
    duration = time.monotonic() - started
    out["duration"] = round(duration, 6)
    if duration > timeout and "error" not in out:
        del out["update"]  # a late result is never applied
        out["late"] = True
        out["error"] = {"type": "NodeTimeout",
                        "message": f"finished after {duration:.3f}s, timeout {timeout}s"}
    return out


def _checked_update(value: Any) -> Envelope:
    if value is None:
        return {"update": {}}
    if not isinstance(value, Mapping):
        return {"error": {"type": "InvalidNodeOutput",
                          "message": f"a node must return a dict, got {type(value).__name__}"}}
    update = dict(value)
    if not all(isinstance(k, str) for k in update) or not is_json(update):
        return {"error": {"type": "InvalidState",
                          "message": "node output is not JSON-serializable"}}
    return {"update": update}


def _record_edge(rt: Runtime, envelope: Envelope) -> Envelope:
    """Store the edge outcome once (first writer wins); the reducer's coordinator
    step writes it to the event log together with the reducer's outcome."""
    data = {k: v for k, v in envelope.items() if k != "run_id"}
    stored = rt.store.put_outcome(envelope["run_id"], f"{envelope['execution_id']}:done", data)
    return {"run_id": envelope["run_id"], **stored}


def edge_ref(env: Envelope, outcome: Envelope | None) -> Envelope:
    """What an edge hands the chord join: a reference, not the node's output.
    The outcome itself is in the event store; the result backend (and Flower,
    and worker logs) only ever see ids."""
    ref: Envelope = {"execution_id": env["execution_id"], "index": env["index"]}
    if outcome is None or outcome.get("stale"):
        ref["stale"] = True
    return ref


def run_reducer(rt: Runtime, graph: Graph, meta: Envelope, results: list[Any]) -> Envelope:
    """The chord callback: consolidate edge outcomes in declaration order."""
    out: Envelope = {"run_id": meta["run_id"], "execution_id": meta["execution_id"],
                     "reducer": meta["reducer"]}
    refs, complete = _declaration_order(results, meta["width"])
    stored = rt.store.outcomes([f"{r['execution_id']}:done" for r in refs])
    edges = [stored[key] for r in refs if (key := f"{r['execution_id']}:done") in stored]
    out["edges"] = edges
    if not complete or len(edges) != len(refs):
        return {**out, "stale": True}  # the run stopped awaiting this fan-out
    started = time.monotonic()
    view = rt.store.load(meta["run_id"])
    try:
        outcomes = [_outcome(e) for e in edges]
        value = graph.reducers[meta["reducer"]]((view or {}).get("state", {}), outcomes)
        out.update(_checked_update(value))
    except Exception as exc:
        out["error"] = error_json(exc)
    out["duration"] = round(time.monotonic() - started, 6)
    return out


def _declaration_order(results: list[Any], width: int) -> tuple[list[Envelope], bool]:
    """Edge references by declaration index, and whether all of them ran."""
    by_index: dict[int, Envelope] = {}
    complete = True
    for item in results:
        if not isinstance(item, dict) or "index" not in item or item.get("stale"):
            complete = False
            continue
        by_index.setdefault(int(item["index"]), item)
    complete = complete and sorted(by_index) == list(range(width))
    return [by_index[i] for i in sorted(by_index)], complete


def _outcome(envelope: Envelope) -> Outcome:
    err = envelope.get("error")
    return Outcome(
        node_id=envelope["node_id"],
        ok=err is None,
        value=envelope.get("update"),
        error=ErrorInfo.from_json(err) if err else None,
        execution_id=envelope["execution_id"],
    )
