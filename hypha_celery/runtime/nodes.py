"""Node, edge and reducer execution. Each returns a typed outcome
(:mod:`~hypha_celery.runtime.protocol`) and never raises into the canvas, so a failing
edge cannot strand a chord.

:func:`call_node` and :func:`reduce` are the calls themselves (a node's or a reducer's
function, its return value checked): the runtime and a re-execution
(:mod:`hypha_celery.rerun`) make them alike.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from hypha_celery.errors import AwaitingMessage, EffectOutcomeUnknown
from hypha_celery.events import View
from hypha_celery.graph import Graph, Node, NodeContext
from hypha_celery.graph.calls import Calls
from hypha_celery.graph.jsonsafe import error_data, json_size_or_none
from hypha_celery.graph.model import ApprovedReview
from hypha_celery.runtime import failures, seams
from hypha_celery.runtime.cancels import CancelFlag
from hypha_celery.runtime.core import Runtime, awaits
from hypha_celery.runtime.late import record_late
from hypha_celery.runtime.leases import worker_name
from hypha_celery.runtime.llmcontext import build_for_llm
from hypha_celery.runtime.memory import run_memory
from hypha_celery.runtime.protocol import (
    EdgeRef,
    ErrorJson,
    FanoutMeta,
    NodeMessage,
    NodeOutcome,
    NodeResult,
    ReducerOutcome,
    StartedJson,
)

__all__ = ["approved_review", "call_node", "checked_update", "edge_ref", "effect_key",
           "node_error", "reduce", "run_node", "run_reducer", "settle"]

def _cancel_flag(rt: Runtime, run_id: str, awaited: str) -> Callable[[], bool]:
    """``ctx.cancelled()``: true once the run stopped awaiting this execution
    (cancelled, ended, or timed out); the store is read at most every 0.2 s. Blocked
    node code registers what stops it with :func:`~.cancels.on_cancel`."""
    return CancelFlag(rt.store, run_id, awaited)


def run_node(
    rt: Runtime, graph: Graph, msg: NodeMessage, attempt: int = 1
) -> tuple[NodeOutcome | None, View | None]:
    """Run one node or edge execution; returns the outcome (``None``: the run no
    longer awaits it) and the run view read before running (for the coordinator's
    optimistic write). Pass the outcome through :func:`settle` once it is final
    (after the retry decision).

    Nothing is written before an idempotent node runs: ``node.execution.started`` (with the
    real start time) is appended in the same transaction as the outcome — one
    commit per step. An at-most-once node commits ``node.execution.started`` first.
    """
    run_id, execution_id = msg.run_id, msg.execution_id
    if msg.edge_of is not None:
        view, stored = rt.store.read_edge(run_id, f"{execution_id}:done")
        if stored is not None:  # not run again
            return replace(NodeOutcome.from_json(stored, run_id), settled=True), None
    else:
        view = rt.store.load(run_id)
    if view is None or not awaits(view, msg.awaited):
        return None, None
    node, worker = graph.nodes[msg.node_id], worker_name()
    if node.at_most_once:
        if not failures.begin_effect(rt, msg, attempt, worker):
            return None, None  # started before: never silently re-executed
        view = rt.store.load(run_id)
        assert view is not None
    started: StartedJson = {"execution_id": execution_id, "node_id": msg.node_id,
                            "attempt": attempt, "worker": worker, "at": time.time()}
    calls = Calls(execution_id, msg.node_id, attempt=attempt, run_id=run_id,
                  middleware=rt.middleware)
    ctx = NodeContext(run_id, execution_id, msg.node_id, attempt,
                      _cancel_flag(rt, run_id, msg.awaited), calls, approved_review(view),
                      rt.llm, rt.live, node.models or None,
                      partial(run_memory, rt, view), build_for_llm)
    outcome = _execute(graph, node, copy.deepcopy(view["state"]), msg, ctx, calls,
                       None if node.at_most_once else started)
    return outcome, view


def approved_review(view: View) -> ApprovedReview | None:
    """The review approved right before the awaited execution was scheduled: requested
    at the step before it, approved since (``{"review_id", "by"}``)."""
    step = int(view["step"] or 0) - 1
    for review_id, review in view["reviews"].items():
        if review["status"] == "approved" and review["step"] == step:
            return {"review_id": review_id, "by": review.get("by")}
    return None


def settle(rt: Runtime, graph: Graph, outcome: NodeOutcome, attempt: int) -> NodeOutcome:
    """Store what must survive the task: an edge's outcome (the reducer loads it) and
    an at-most-once node's outcome (the supervisor finds it if the coordinator
    message is lost). First writer wins."""
    if outcome.settled:
        return outcome
    if outcome.edge_of is not None:
        return _store_edge(rt, outcome, attempt)
    if graph.nodes[outcome.node_id].at_most_once:
        return _store_outcome(rt, outcome, effect_key(outcome.execution_id, attempt))
    return outcome


def effect_key(execution_id: str, attempt: int) -> str:
    return f"{execution_id}:effect:{attempt}"


def call_node(node: Node, state: dict[str, object], input: Any, ctx: NodeContext,
              max_bytes: int | None = None) -> NodeResult:
    """Call ``node``'s function and check what it returned (its exceptions propagate);
    an output of more than ``max_bytes`` of JSON is an error."""
    if node.takes_ctx:
        return checked_update(node.fn(state, input, ctx), max_bytes)
    return checked_update(node.fn(state, input), max_bytes)


def _execute(graph: Graph, node: Node, state: dict[str, object], msg: NodeMessage,
             ctx: NodeContext, calls: Calls | None = None, started: StartedJson | None = None,
             ) -> NodeOutcome:
    """Run the node; its outcome, with the ``calls`` it made and its ``started`` record."""
    timeout = graph.timeout_for(msg.node_id)
    began = time.monotonic()
    try:
        result = call_node(node, state, msg.input, ctx, graph.max_state_bytes)
    except SoftTimeLimitExceeded:
        result = NodeResult(error={"type": "NodeTimeout", "class": "timeout",
                                   "message": f"node ran past its {timeout}s timeout"})
    except Exception as exc:
        result = NodeResult(error=node_error(exc))
    duration = time.monotonic() - began
    late = duration > timeout and result.error is None
    if late:  # a late result is never applied
        result = NodeResult(error={"type": "NodeTimeout", "class": "timeout",
                                   "message": f"finished after {duration:.3f}s, "
                                              f"timeout {timeout}s"})
    return NodeOutcome(
        msg.run_id, msg.execution_id, msg.node_id, result.update, result.error,
        round(duration, 6), msg.edge_of, msg.index, late,
        calls.records or None if calls else None,
        [list(f) for f in calls.facts] or None if calls else None, started)


def node_error(exc: Exception) -> ErrorJson:
    """What a node raised as its outcome's error; an
    :class:`~hypha_celery.errors.EffectOutcomeUnknown` is marked ``"effect": "unknown"``
    (the coordinator quarantines the run, the retry middleware leaves it)."""
    error = error_data(exc)
    if isinstance(exc, EffectOutcomeUnknown):
        error["effect"] = "unknown"
    elif isinstance(exc, AwaitingMessage):  # not a failure: the run parks
        error["awaiting"] = {"message_id": exc.message_id, "queue": exc.queue,
                             "until": exc.until}
    return error


def checked_update(value: Any, max_bytes: int | None = None) -> NodeResult:
    """A node's / reducer's return value as the update it is, or the error it is. An
    update of more than ``max_bytes`` of JSON (the graph's ``max_state_bytes``: it could
    never fit the state) is refused here, before it travels to the coordinator."""
    if value is None:
        return NodeResult(update={})
    if not isinstance(value, Mapping):
        return NodeResult(error={"type": "InvalidNodeOutput", "class": "validation",
                                 "message": "a node must return a dict, got "
                                            f"{type(value).__name__}"})
    update = dict(value)
    size = json_size_or_none(update) if all(isinstance(k, str) for k in update) else None
    if size is None:
        return NodeResult(error={"type": "InvalidState", "class": "validation",
                                 "message": "node output is not JSON-serializable"})
    if max_bytes is not None and size > max_bytes:
        return NodeResult(error={"type": "NodeOutputTooLarge", "class": "validation",
                                 "message": f"node output is {size} bytes of JSON, more than "
                                            f"max_state_bytes ({max_bytes})"})
    return NodeResult(update=update)


def _store_edge(rt: Runtime, outcome: NodeOutcome, attempt: int) -> NodeOutcome:
    """Store an edge outcome; if the run stopped awaiting the fan-out meanwhile (it was
    cancelled, and its queued edges revoked, so the reducer may never run), the edge
    records its own late result."""
    data = outcome.stored_json()
    run_id, eid = outcome.run_id, outcome.execution_id
    assert outcome.edge_of is not None
    stored, still = rt.store.put_edge_outcome(run_id, f"{eid}:done", data, outcome.edge_of)
    first = replace(NodeOutcome.from_json(stored, run_id), settled=True)
    timed_out = (first.error or {}).get("by") == "supervisor" and stored != data
    if not still or timed_out:
        record_late(rt, seams.late_attempt(outcome, attempt), timed_out=timed_out)
    return first


def _store_outcome(rt: Runtime, outcome: NodeOutcome, key: str) -> NodeOutcome:
    """Store an outcome once (first writer wins); the coordinator step writes it to
    the event log (for edges: together with the reducer's outcome)."""
    stored = rt.store.put_outcome(outcome.run_id, key, outcome.stored_json())
    return replace(NodeOutcome.from_json(stored, outcome.run_id), settled=True)


def edge_ref(msg: NodeMessage, outcome: NodeOutcome | None) -> EdgeRef:
    """What an edge hands the chord join: a reference, not the node's output.
    The outcome itself is in the event store; the result backend (and Flower,
    and worker logs) only ever see ids."""
    assert msg.index is not None
    return EdgeRef(msg.execution_id, msg.index, stale=outcome is None)


def run_reducer(rt: Runtime, graph: Graph, meta: FanoutMeta, results: list[Any]
                ) -> ReducerOutcome:
    """The chord callback: consolidate edge outcomes in declaration order."""
    refs, complete = _declaration_order(results, meta.width)
    keys = [f"{r.execution_id}:done" for r in refs]
    stored = rt.store.outcomes(keys)
    edges = tuple(NodeOutcome.from_json(stored[k], meta.run_id) for k in keys if k in stored)
    if not complete or len(edges) != len(refs):  # the run stopped awaiting this fan-out
        return ReducerOutcome(meta.run_id, meta.execution_id, meta.reducer, edges, stale=True)
    started = time.monotonic()
    view = rt.store.load(meta.run_id)
    try:
        result = reduce(graph, meta.reducer, view["state"] if view else {}, edges)
    except Exception as exc:
        result = NodeResult(error=error_data(exc))
    return ReducerOutcome(meta.run_id, meta.execution_id, meta.reducer, edges, result.update,
                          result.error, round(time.monotonic() - started, 6))


def reduce(graph: Graph, reducer: str, state: dict[str, object], edges: Sequence[NodeOutcome]
           ) -> NodeResult:
    """Call ``reducer`` on the edges' outcomes (its exceptions propagate). An edge whose
    output was not JSON ends the run as a node's does: its error is the reducer's, and
    the reducer is not called."""
    for edge in edges:
        if edge.fatal:
            assert edge.error is not None
            return NodeResult(error=_fatal_edge(edge, edge.error))
    return checked_update(graph.reducers[reducer](state, [e.outcome() for e in edges]),
                          graph.max_state_bytes)


def _fatal_edge(edge: NodeOutcome, error: ErrorJson) -> ErrorJson:
    return {"type": error.get("type", "InvalidState"), "class": "validation",
            "message": f"edge {edge.node_id} ({edge.execution_id}): "
                       f"{error.get('message', '')}"}


def _declaration_order(results: list[Any], width: int) -> tuple[list[EdgeRef], bool]:
    """Edge references by declaration index, and whether all of them ran."""
    by_index: dict[int, EdgeRef] = {}
    complete = True
    for item in results:
        ref = EdgeRef.from_json(item)
        if ref is None or ref.stale:
            complete = False
            continue
        by_index.setdefault(ref.index, ref)
    complete = complete and sorted(by_index) == list(range(width))
    return [by_index[i] for i in sorted(by_index)], complete
