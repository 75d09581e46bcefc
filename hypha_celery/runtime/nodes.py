"""Node, edge and reducer execution. Each returns an outcome envelope (a JSON
dict) and never raises into the canvas, so a failing edge cannot strand a chord.

Envelope keys: ``run_id``, ``execution_id``, ``node_id`` | ``reducer``, then
``update`` (ok) or ``error`` (``{type, message}``), ``duration``, ``calls`` (the model and
tool calls made through ``ctx``, see :mod:`hypha_celery.graph.calls`); edges add
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
from hypha_celery.graph import ErrorInfo, Graph, NodeContext, Outcome
from hypha_celery.graph.calls import Calls
from hypha_celery.graph.jsonsafe import error_json, is_json
from hypha_celery.runtime import failures
from hypha_celery.runtime.core import Envelope, Runtime, awaits

__all__ = ["Envelope", "awaits", "checked_update", "edge_ref", "outcome_of", "run_node",
           "run_reducer"]

_HOST = socket.gethostname()
#: How long a ``ctx.cancelled()`` answer is reused before the store is asked again (s).
CANCEL_CHECK_INTERVAL = 0.2


def _worker() -> str:
    """``host:pid`` of the process running the node: read per call, because a
    prefork child imports this module in its parent, before the fork."""
    return f"{_HOST}:{os.getpid()}"


#: Error types that end the run whatever ``on_node_error`` says.
FATAL_ERRORS = frozenset({"InvalidState", "InvalidNodeOutput"})


def _cancel_flag(rt: Runtime, run_id: str, awaited: str) -> Any:
    """``ctx.cancelled()``: true once the run stopped awaiting this execution
    (cancelled, ended, or timed out); the store is read at most every 0.2 s."""
    last = {"at": 0.0, "value": False}

    def cancelled() -> bool:
        now = time.monotonic()
        if not last["value"] and now - last["at"] >= CANCEL_CHECK_INTERVAL:
            view = rt.store.read(run_id)
            last["value"] = bool(not awaits(view, awaited) or (view or {}).get("cancel_requested"))
            last["at"] = now
        return bool(last["value"])

    return cancelled


def run_node(
    rt: Runtime, graph: Graph, env: Envelope, attempt: int = 1
) -> tuple[Envelope | None, View | None]:
    """Run one node or edge execution; returns the outcome envelope (``None``: the
    run no longer awaits it) and the run view read before running (for the
    coordinator's optimistic write). Pass the outcome through :func:`settle`
    once it is final (after the retry decision).

    Nothing is written before an idempotent node runs: ``node.execution.started`` (with the
    real start time) is appended in the same transaction as the outcome — one
    commit per step. An at-most-once node commits ``node.execution.started`` first.
    """
    run_id, execution_id = env["run_id"], env["execution_id"]
    if env.get("edge_of"):
        view, stored = rt.store.read_edge(run_id, f"{execution_id}:done")
        if stored is not None:
            return {"run_id": run_id, **stored, "settled": True}, None  # not run again
    else:
        view = rt.store.read(run_id)
    awaited = env.get("edge_of") or execution_id
    if not awaits(view, awaited):
        return None, None
    assert view is not None
    node, worker = graph.nodes[env["node_id"]], _worker()
    if node.at_most_once:
        if not failures.begin_effect(rt, env, attempt, worker):
            return None, None  # started before: never silently re-executed
        view = rt.store.read(run_id)
    started = {"execution_id": execution_id, "node_id": env["node_id"], "attempt": attempt,
               "worker": worker, "at": time.time()}
    calls = Calls(execution_id, env["node_id"], attempt=attempt)
    ctx = NodeContext(run_id, execution_id, env["node_id"], attempt,
                      _cancel_flag(rt, run_id, awaited), calls, approved_review(view or {}))
    envelope = _execute(graph, env["node_id"], copy.deepcopy((view or {})["state"]), env, ctx)
    if calls.records:
        envelope["calls"] = calls.records
    if calls.facts:
        envelope["facts"] = [list(f) for f in calls.facts]
    if not node.at_most_once:  # an at-most-once start is already in the log
        envelope["started"] = started
    return envelope, view


def approved_review(view: View) -> dict[str, Any] | None:
    """The review approved right before the awaited execution was scheduled: requested
    at the step before it, approved since (``{"review_id", "by"}``)."""
    step = int(view.get("step") or 0) - 1
    for review_id, review in (view.get("reviews") or {}).items():
        if review.get("status") == "approved" and review.get("step") == step:
            return {"review_id": review_id, "by": review.get("by")}
    return None


def settle(rt: Runtime, graph: Graph, outcome: Envelope, attempt: int) -> Envelope:
    """Store what must survive the task: an edge's outcome (the reducer loads it) and
    an at-most-once node's outcome (the supervisor finds it if the coordinator
    message is lost). First writer wins."""
    if outcome.get("settled"):
        return outcome
    if outcome.get("edge_of"):
        return _store_edge(rt, outcome)
    if graph.nodes[outcome["node_id"]].at_most_once:
        return _store_outcome(rt, outcome, effect_key(outcome["execution_id"], attempt))
    return outcome


def effect_key(execution_id: str, attempt: int) -> str:
    return f"{execution_id}:effect:{attempt}"


def _execute(graph: Graph, node_id: str, state: dict[str, Any], env: Envelope,
             ctx: NodeContext) -> Envelope:
    out: Envelope = {"run_id": env["run_id"], "execution_id": env["execution_id"],
                     "node_id": node_id}
    if env.get("edge_of"):
        out["edge_of"] = env["edge_of"]
        out["index"] = env["index"]
    timeout = graph.timeout_for(node_id)
    started = time.monotonic()
    node = graph.nodes[node_id]
    try:
        if node.takes_ctx:
            value = node.fn(state, env.get("input"), ctx)
        else:
            value = node.fn(state, env.get("input"))
        out.update(checked_update(value))
    except SoftTimeLimitExceeded:
        out["error"] = {"type": "NodeTimeout", "message": f"node ran past its {timeout}s timeout",
                        "class": "timeout"}
    except Exception as exc:
        out["error"] = error_json(exc)
    duration = time.monotonic() - started
    out["duration"] = round(duration, 6)
    if duration > timeout and "error" not in out:
        del out["update"]  # a late result is never applied
        out["late"] = True
        out["error"] = {"type": "NodeTimeout", "class": "timeout",
                        "message": f"finished after {duration:.3f}s, timeout {timeout}s"}
    return out


def checked_update(value: Any) -> Envelope:
    """``{"update": ...}`` for a node's / reducer's return value, or the ``error`` it is."""
    if value is None:
        return {"update": {}}
    if not isinstance(value, Mapping):
        return {"error": {"type": "InvalidNodeOutput", "class": "validation",
                          "message": f"a node must return a dict, got {type(value).__name__}"}}
    update = dict(value)
    if not all(isinstance(k, str) for k in update) or not is_json(update):
        return {"error": {"type": "InvalidState", "class": "validation",
                          "message": "node output is not JSON-serializable"}}
    return {"update": update}


def _store_edge(rt: Runtime, envelope: Envelope) -> Envelope:
    """Store an edge outcome; if the run stopped awaiting the fan-out meanwhile (it was
    cancelled, and its queued edges revoked, so the reducer may never run), the edge
    records its own late result."""
    data = {k: v for k, v in envelope.items() if k != "run_id"}
    run_id, eid = envelope["run_id"], envelope["execution_id"]
    stored, still = rt.store.put_edge_outcome(run_id, f"{eid}:done", data, envelope["edge_of"])
    timed_out = (stored.get("error") or {}).get("by") == "supervisor" and stored != data
    if not still or timed_out:
        from hypha_celery.runtime.coordinator import record_late

        record_late(rt, run_id, eid, envelope["node_id"], timed_out=timed_out)
    return {"run_id": run_id, **stored, "settled": True}


def _store_outcome(rt: Runtime, envelope: Envelope, key: str) -> Envelope:
    """Store an outcome once (first writer wins); the coordinator step writes it to
    the event log (for edges: together with the reducer's outcome)."""
    data = {k: v for k, v in envelope.items() if k != "run_id"}
    stored = rt.store.put_outcome(envelope["run_id"], key, data)
    return {"run_id": envelope["run_id"], **stored, "settled": True}


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
        outcomes = [outcome_of(e) for e in edges]
        value = graph.reducers[meta["reducer"]]((view or {}).get("state", {}), outcomes)
        out.update(checked_update(value))
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


def outcome_of(envelope: Envelope) -> Outcome:
    """The :class:`Outcome` a reducer (or a re-execution) sees for an edge envelope."""
    err = envelope.get("error")
    return Outcome(
        node_id=envelope["node_id"],
        ok=err is None,
        value=envelope.get("update"),
        error=ErrorInfo.from_json(err) if err else None,
        execution_id=envelope["execution_id"],
    )
