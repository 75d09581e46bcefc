"""The coordinator step: fence, record the outcome, decide, record, publish.

All of it happens in one store transaction on the locked run row, so a
duplicate or stale message can never advance a run twice (it finds the run no
longer waiting for its execution id) and exactly one terminal event is written.
Publishing happens after the commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from hypha_celery.errors import FailureReason, StoreConflict
from hypha_celery.events import RunStatus, View, as_kind
from hypha_celery.events.payloads import (
    DecisionPolicyRecorded,
    FanoutEdge,
    HumanReviewRequested,
    NodeExecutionDeadLettered,
    NodeExecutionLateResult,
    NodeExecutionScheduled,
    NodeFanoutScheduled,
    RunCompleted,
    RunFailed,
    RunParked,
    RunQuarantined,
    RunReleased,
    RunSuspended,
    RunWaitingHuman,
    TerminalPayload,
)
from hypha_celery.graph import Decision, Fail, FanOut, Finish, Graph, Next, Review
from hypha_celery.graph.jsonsafe import error_json, is_json, json_size
from hypha_celery.runtime import canvas, lifecycle, seams
from hypha_celery.runtime.attempts import record_attempt, scheduled_message
from hypha_celery.runtime.config import EFFECTS_QUEUE, IO_QUEUE, NODES_QUEUE
from hypha_celery.runtime.core import Runtime, awaits
from hypha_celery.runtime.lanes import kickoff_id, release
from hypha_celery.runtime.late import log_late
from hypha_celery.runtime.protocol import (
    EFFECT_OUTCOME_UNKNOWN,
    FATAL_ERRORS,
    FanoutMeta,
    Kickoff,
    NodeMessage,
    NodeOutcome,
    Payload,
    ReducerOutcome,
    summary,
)
from hypha_celery.store import Tx
from hypha_celery.store import bus as messages

__all__ = ["coordinate", "fanout_calls", "local_limit", "node_call", "publish_fanout",
           "resume", "run_outcome", "step_locked", "terminal"]


class _Fail(Exception):
    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class _Park(Exception):
    """A dead-lettered node the policy does not handle, on a graph that parks."""


def coordinate(
    rt: Runtime, payload: Payload, seen: View | None = None,
    local: canvas.LocalSteps | None = None,
) -> canvas.NodeCall | None:
    """One coordinator step for ``payload`` (a kickoff or an outcome).

    ``seen`` is the run view the node task read before running: if the run has not
    moved since (the common case), the step is written optimistically without a
    row lock; on conflict it is redone on the locked row (the policy is
    deterministic, so deciding twice is harmless).

    With ``local``, the next node may be handed back to the calling task to run
    itself (returned) instead of being published.
    """
    if seen is not None and awaits(seen, payload.execution_id):
        try:
            with rt.store.transaction() as tx:
                _step(tx, rt, tx.expect(seen), payload, local)
            return local.take() if local else None
        except StoreConflict:
            if local:
                local.take()
    with rt.store.transaction() as tx:
        view = tx.lock(payload.run_id)
        if view is None:
            return None
        if not awaits(view, payload.execution_id):
            _not_awaited(tx, rt, view, payload)
            return None
        _step(tx, rt, view, payload, local)
    return local.take() if local else None


def step_locked(tx: Tx, rt: Runtime, view: View, payload: Payload) -> None:
    """A coordinator step for ``payload`` on a run the caller has locked and checked
    (the recovery supervisor feeds timeouts and reconciled outcomes this way; it calls
    ``before_step`` / ``after_step`` around the transaction)."""
    _step(tx, rt, view, payload, None)


def _step(
    tx: Tx, rt: Runtime, view: View, payload: Payload, local: canvas.LocalSteps | None
) -> None:
    if isinstance(payload, NodeOutcome) and payload.edge_of is None:
        if payload.effect_unknown:
            _quarantine(tx, view, payload)
            return
        if payload.awaiting is not None:
            _park_for_message(tx, rt, view, payload)
            return
    if not isinstance(payload, Kickoff):  # (a review's outcome is already recorded)
        _record_outcome(tx, rt, view, payload)
    _decide_and_record(tx, rt, view, local)


def _quarantine(tx: Tx, view: View, outcome: NodeOutcome) -> None:
    """A node's outcome whose effect may or may not have happened (its error is marked
    ``"effect": "unknown"``: it raised an :class:`~hypha_celery.errors.EffectOutcomeUnknown`,
    such as ``McpOutcomeUnknown``) quarantines the run, as the supervisor does for an
    at-most-once node whose worker died: no retry, no decision, no ``run.failed``.

    What the attempt did is recorded as a retried attempt's is (its start, its
    ``tool.call.*`` / ``mcp.call.*`` calls and facts), then ``run.quarantined`` (reason
    ``effect_outcome_unknown``). The outcome itself (``node.execution.failed``) is not
    written: folded, it would end the wait for the execution, and its ``:done`` key would
    refuse the next attempt's outcome. So the run still awaits the execution, held:
    :func:`~hypha_celery.beat.operator.release` runs the node again as its next attempt
    (whose outcome is the execution's one outcome), ``fail_quarantined`` ends the run."""
    run_id, attempt = view["run_id"], int(view["attempt"] or 1)
    record_attempt(tx, run_id, outcome)
    lifecycle.emit(tx, run_id, RunQuarantined(
        execution_id=outcome.execution_id, node_id=outcome.node_id, attempt=attempt,
        reason=EFFECT_OUTCOME_UNKNOWN), idem=f"{outcome.execution_id}:quarantined:{attempt}")


def _park_for_message(tx: Tx, rt: Runtime, view: View, outcome: NodeOutcome) -> None:
    """The node raised :class:`~hypha_celery.errors.AwaitingMessage`: what the attempt
    did is recorded (as a retried attempt's is), then ``run.suspended`` — the run
    holds no worker until the message comes — unless it came already (its publish
    committed before this step, which it serialized with on the run row: the publish
    writes ``message.enqueued`` to this run's log), then the node runs again at once.
    As for a quarantine, the outcome is not folded: the run still awaits the execution,
    whose next attempt (run by :func:`resume`) finds the message."""
    run_id, attempt, awaited = view["run_id"], int(view["attempt"] or 1), outcome.awaiting
    assert awaited is not None
    record_attempt(tx, run_id, outcome)
    if messages.reply_waiting(tx, awaited["queue"], awaited["message_id"]):
        _rerun_awaited(tx, rt, view, outcome.execution_id, attempt + 1)
        return
    lifecycle.emit(tx, run_id, RunSuspended(
        execution_id=outcome.execution_id, node_id=outcome.node_id, attempt=attempt,
        message_id=awaited["message_id"], queue=awaited["queue"], until=awaited["until"]),
        idem=f"{outcome.execution_id}:awaiting:{attempt}")


def resume(rt: Runtime, run_id: str, message_id: str | None = None) -> bool:
    """Run a parked run's node again (its next attempt) if the message it awaits is
    queued: the bus calls it after a message to ``workflow:<run_id>`` commits
    (``message_id``: the message's ``correlation_id``), the recovery supervisor for every
    parked run it examines (a resume lost with its process). Whether it resumed."""
    with rt.store.transaction() as tx:
        view = tx.lock(run_id)
        awaited = None if view is None else view.get("awaiting_message")
        if view is None or awaited is None or view["status"] != RunStatus.RUNNING \
                or message_id not in (None, awaited["message_id"]) \
                or not messages.reply_waiting(tx, awaited["queue"], awaited["message_id"]):
            return False
        _rerun_awaited(tx, rt, view, awaited["execution_id"], awaited["attempt"] + 1)
    return True


def _rerun_awaited(tx: Tx, rt: Runtime, view: View, execution_id: str, attempt: int) -> None:
    """``run.released`` (action ``message``) and, after the commit, the awaited node's
    next attempt."""
    graph = rt.graphs.get(view["graph_id"] or "")
    if graph is None:
        terminal(tx, rt, view, RunFailed(
            reason=FailureReason.UNKNOWN_GRAPH.value,
            message=f"graph {view['graph_id']!r} is not registered on this worker"))
        return
    msg = scheduled_message(rt.store, view).with_attempt(attempt)
    lifecycle.emit(tx, view["run_id"], RunReleased(execution_id=execution_id, attempt=attempt,
                                                   action="message"))
    call = node_call(rt, graph, msg)
    tx.after_commit(lambda: canvas.step(rt.app, call))


def _not_awaited(tx: Tx, rt: Runtime, view: View, payload: Payload) -> None:
    """Duplicate (already recorded) or stale (late) result: record, apply nothing."""
    if isinstance(payload, ReducerOutcome):  # a fan-out: the edges that ran were late
        log_late(tx, rt, view, [seams.late_attempt(e) for e in payload.edges])
    elif isinstance(payload, NodeOutcome):
        log_late(tx, rt, view, [seams.late_attempt(payload)])
    # else a duplicate kickoff or review resume: nothing ran


def _record_dead_letter(tx: Tx, rt: Runtime, run_id: str, outcome: NodeOutcome) -> int | None:
    """Write the dead-letter record an outcome carries, and ``node.execution.dead_lettered``."""
    record = outcome.dead_letter
    if not record:
        return None
    dlid = rt.store.add_dead_letter({**record, "run_id": run_id,
                                     "execution_id": outcome.execution_id,
                                     "error": outcome.error or {}}, tx=tx)
    tx.emit(run_id, NodeExecutionDeadLettered(
        execution_id=outcome.execution_id, node_id=outcome.node_id, dead_letter_id=dlid,
        reason=record["reason"], attempts=record["attempts"], error=outcome.error))
    return dlid


def _record_node(tx: Tx, rt: Runtime, run_id: str, outcome: NodeOutcome,
                 attempt: int = 1) -> None:
    """``node.execution.started`` (at its real time), its model and tool calls, a
    ``node.execution.late_result`` if it ran past its timeout (told after the commit), a
    dead letter, then the outcome — once per execution (idempotency key)."""
    record_attempt(tx, run_id, outcome)
    if outcome.late:
        tx.emit(run_id, NodeExecutionLateResult(execution_id=outcome.execution_id,
                                                node_id=outcome.node_id, reason="timeout"))
        seams.late_result(tx, rt, seams.late_attempt(outcome, attempt), "timeout")
    dlid = _record_dead_letter(tx, rt, run_id, outcome)
    started = outcome.started
    ended = started["at"] + (outcome.duration or 0.0) if started else None
    tx.emit(run_id, outcome.event(dlid), idem=f"{outcome.execution_id}:done", ts=ended)


def _record_outcome(tx: Tx, rt: Runtime, view: View,
                    outcome: NodeOutcome | ReducerOutcome) -> None:
    run_id = view["run_id"]
    if isinstance(outcome, NodeOutcome):
        _record_node(tx, rt, run_id, outcome, int(view["attempt"] or 1))
        return
    for edge in outcome.edges:
        _record_node(tx, rt, run_id, edge)
    tx.emit(run_id, outcome.event(), idem=f"{outcome.execution_id}:done")


def _decide_and_record(
    tx: Tx, rt: Runtime, view: View, local: canvas.LocalSteps | None = None
) -> None:
    run_id = view["run_id"]
    graph = rt.graphs.get(view["graph_id"] or "")
    try:
        if graph is None:
            raise _Fail(FailureReason.UNKNOWN_GRAPH,
                        f"graph {view['graph_id']!r} is not registered on this worker")
        decision, facts = _decide(graph, view)
    except _Fail as fail:
        terminal(tx, rt, view, RunFailed(reason=fail.reason.value, message=fail.message))
        return
    except _Park:
        last = view["last"]
        assert last is not None
        lifecycle.emit(tx, run_id, RunParked(execution_id=last["execution_id"],
                                             node_id=last["node_id"],
                                             dead_letter_id=last.get("dead_letter_id")))
        return
    step = int(view["step"])
    tx.emit(run_id, DecisionPolicyRecorded(step=step, **summary(decision)))
    for kind, data in facts:  # after the decision: a replay decides on the view before them
        tx.append(run_id, as_kind(kind), data)
    if isinstance(decision, Finish):
        terminal(tx, rt, view, RunCompleted(result=decision.result))
    elif isinstance(decision, Fail):
        terminal(tx, rt, view, RunFailed(reason=decision.reason,
                                         message=decision.message[:500]))
    elif isinstance(decision, Review):
        _park_for_review(tx, view, decision)
    elif isinstance(decision, Next):
        _schedule_next(tx, rt, graph, view, decision, local)
    else:
        _schedule_fanout(tx, rt, graph, view, decision)


def _decide(graph: Graph, view: View
            ) -> tuple[Decision, list[tuple[str, dict[str, object]]]]:
    """The policy's decision and the facts it recorded with it (``ctx.record``)."""
    if view["deadline"] is not None and time.time() > view["deadline"]:
        raise _Fail(FailureReason.DEADLINE_EXCEEDED,
                    f"execution_timeout of {graph.execution_timeout}s passed")
    _check_last(graph, view)
    ctx = graph.context(view)
    try:
        decision = graph.decision_policy(ctx)
    except Exception as exc:
        err = error_json(exc)
        raise _Fail(FailureReason.POLICY_ERROR, f"{err['type']}: {err['message']}") from None
    _validate(graph, view, decision)
    if not all(is_json(data) for _, data in ctx.facts):
        raise _Fail(FailureReason.INVALID_DECISION, "a fact the policy recorded is not JSON")
    return decision, ctx.facts


def _check_last(graph: Graph, view: View) -> None:
    last = view["last"]
    if last is None:
        return
    size = json_size(view["state"])
    if size > graph.max_state_bytes:
        raise _Fail(FailureReason.STATE_TOO_LARGE,
                    f"state is {size} bytes, max_state_bytes is {graph.max_state_bytes}")
    err = last["error"]
    if last["ok"] or err is None:
        return
    where = f"{last['node_id']}: {err.get('type')}: {err.get('message')}"
    if err.get("type") in FATAL_ERRORS:
        raise _Fail(FailureReason.INVALID_STATE, where)
    if err.get("dead_letter") and graph.on_node_error == "fail":
        if graph.on_dead_letter == "park" and last["node_id"] in graph.nodes:
            raise _Park()
        raise _Fail(FailureReason.DEAD_LETTERED, where)
    if graph.on_node_error == "fail":
        reason = (FailureReason.REDUCER_FAILED if last["node_id"] in graph.reducers
                  else FailureReason.NODE_FAILED)
        raise _Fail(reason, where)


def _validate_ending(graph: Graph, view: View, decision: Finish | Fail | Review) -> None:
    if isinstance(decision, Finish) and not is_json(decision.result):
        raise _Fail(FailureReason.INVALID_DECISION, "Finish result is not JSON-serializable")
    if isinstance(decision, Review):
        if not is_json(decision.subject):
            raise _Fail(FailureReason.INVALID_DECISION, "Review subject is not JSON")
        if len(view["reviews"]) >= graph.max_steps:
            raise _Fail(FailureReason.MAX_STEPS_EXCEEDED,
                        f"more than max_steps={graph.max_steps} reviews")


def _validate(graph: Graph, view: View, decision: object) -> None:
    if isinstance(decision, Finish | Fail | Review):
        _validate_ending(graph, view, decision)
        return
    if isinstance(decision, Next):
        nexts = [decision]
    elif isinstance(decision, FanOut):
        if decision.reducer not in graph.reducers:
            raise _Fail(FailureReason.UNKNOWN_REDUCER,
                        f"policy returned unknown reducer {decision.reducer!r}")
        if len(decision.edges) > graph.max_fanout:
            raise _Fail(FailureReason.FANOUT_TOO_WIDE, f"FanOut of {len(decision.edges)} "
                        f"edges, past max_fanout={graph.max_fanout}")
        nexts = list(decision.edges)
    else:
        raise _Fail(FailureReason.INVALID_DECISION,
                    "policy must return Next, FanOut, Finish, Fail or Review, got "
                    f"{type(decision).__name__}")
    for n in nexts:
        if n.node_id not in graph.nodes:
            raise _Fail(FailureReason.UNKNOWN_NODE, f"policy returned unknown node {n.node_id!r}")
        if not is_json(n.input):
            raise _Fail(FailureReason.INVALID_DECISION, f"input for {n.node_id!r} is not JSON")
    if int(view["step"]) >= graph.max_steps:
        raise _Fail(FailureReason.MAX_STEPS_EXCEEDED,
                    f"max_steps={graph.max_steps} reached")


def _park_for_review(tx: Tx, view: View, d: Review) -> None:
    """``human.review.requested`` + ``run.waiting_human``: the run holds no worker until
    an approval, rejection or expiry (:mod:`hypha_celery.reviews`) calls the policy again
    with a coordinator message whose execution id is the review id."""
    run_id, now = view["run_id"], time.time()
    review_id = f"{run_id}.r{len(view['reviews']) + 1}"
    tx.emit(run_id, HumanReviewRequested(
        review_id=review_id, reason=d.reason, subject=d.subject, step=int(view["step"]),
        expires_at=None if d.expires_in is None else now + d.expires_in))
    lifecycle.emit(tx, run_id, RunWaitingHuman(review_id=review_id, at=now))


def node_call(rt: Runtime, graph: Graph, msg: NodeMessage) -> canvas.NodeCall:
    """The task message for one node execution (its queue, limits, locality): its own
    queue, else the effects queue (at most once), the I/O queue (it calls models), or
    the nodes queue."""
    node = graph.nodes[msg.node_id]
    queue = node.queue or (EFFECTS_QUEUE if node.at_most_once
                           else IO_QUEUE if node.models else NODES_QUEUE)
    return canvas.NodeCall(task=f"{graph.id}.{msg.node_id}", msg=msg, queue=queue,
                           timeout=graph.timeout_for(msg.node_id), local_budget=rt.local_budget,
                           local_ok=not node.at_most_once)


def _schedule_next(tx: Tx, rt: Runtime, graph: Graph, view: View, d: Next,
                   local: canvas.LocalSteps | None) -> None:
    run_id, step = view["run_id"], int(view["step"]) + 1
    execution_id = f"{run_id}.{step}"
    tx.emit(run_id, NodeExecutionScheduled(execution_id=execution_id, node_id=d.node_id,
                                           input=d.input, step=step))
    call = node_call(rt, graph, NodeMessage(run_id, execution_id, d.node_id, d.input))
    if local is None or not local.offer(call):
        tx.after_commit(lambda: canvas.step(rt.app, call))


def fanout_calls(rt: Runtime, graph: Graph, run_id: str, fid: str,
                 edges: Sequence[Mapping[str, Any]]) -> list[canvas.NodeCall]:
    """The edge messages of fan-out ``fid`` from its scheduled ``edges`` (each
    ``{execution_id, node_id, input}``, an ``attempt`` from the second on)."""
    return [node_call(rt, graph, NodeMessage(run_id, e["execution_id"], e["node_id"],
                                             e.get("input"), fid, i, e.get("attempt")))
            for i, e in enumerate(edges)]


def publish_fanout(rt: Runtime, graph: Graph, run_id: str, fid: str, reducer: str,
                   calls: list[canvas.NodeCall]) -> None:
    meta = FanoutMeta(run_id, fid, reducer, len(calls))
    canvas.fanout(rt.app, calls, f"{graph.id}.{reducer}", meta.to_json(), NODES_QUEUE)


def _schedule_fanout(tx: Tx, rt: Runtime, graph: Graph, view: View, d: FanOut) -> None:
    run_id, step = view["run_id"], int(view["step"]) + 1
    fid = f"{run_id}.{step}"
    edges: list[FanoutEdge] = [{"execution_id": f"{fid}.{i}", "node_id": e.node_id,
                                "input": e.input} for i, e in enumerate(d.edges)]
    tx.emit(run_id, NodeFanoutScheduled(execution_id=fid, step=step, reducer=d.reducer,
                                        edges=edges))
    calls = fanout_calls(rt, graph, run_id, fid, edges)
    tx.after_commit(lambda: publish_fanout(rt, graph, run_id, fid, d.reducer, calls))


def terminal(tx: Tx, rt: Runtime, view: View, end: TerminalPayload) -> None:
    """Append the one terminal event, hand the lane on, notify after commit."""
    run_id = view["run_id"]
    lifecycle.emit(tx, run_id, end, idem=f"{run_id}:terminal")
    nxt = release(tx, run_id, view["lane"])
    seams.run_ended(tx, rt, view, end, nxt)
    outcome = run_outcome(view)
    sig = view["notify"]
    actions: list[Callable[[], None]] = [lambda: rt.notifier.publish(run_id)]
    if sig:
        actions.append(lambda: canvas.notify(rt.app, sig, outcome))
    if nxt is not None:
        nxt_view = tx.lock(nxt)
        nxt_graph = rt.graphs.get(nxt_view["graph_id"] or "") if nxt_view else None
        limit = local_limit(nxt_graph, rt.local_budget) if nxt_graph else None
        actions.append(lambda: canvas.kickoff(rt.app, nxt, kickoff_id(nxt), limit))
    for action in actions:
        tx.after_commit(action)


def local_limit(graph: Graph, budget: float) -> float | None:
    """The soft time limit a kickoff carries so that it may run local steps: the
    graph's longest node timeout plus the budget (none without local steps)."""
    if budget <= 0:
        return None
    return max(graph.timeout_for(n) for n in graph.nodes) + budget


class RunOutcome(TypedDict, total=False):
    """What ``notify`` subscribers are called with: ``result`` or ``error``."""

    run_id: str
    status: str
    result: Any
    error: Any


def run_outcome(view: View) -> RunOutcome:
    """The terminal outcome handed to ``notify`` subscribers."""
    out: RunOutcome = {"run_id": view["run_id"], "status": str(view["status"])}
    if view["status"] == RunStatus.COMPLETED:
        out["result"] = view["result"]
    else:
        out["error"] = view["error"]
    return out
