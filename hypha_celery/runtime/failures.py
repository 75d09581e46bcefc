"""Failure records of one node delivery: redelivery counting (poison messages), retries
and dead letters as the run's events, at-most-once starts, malformed messages.

What to do about a failure is decided elsewhere: whether to retry or dead-letter by the
:class:`~hypha_celery.runtime.retries.Retries` middleware, along the path
:class:`~hypha_celery.runtime.delivery.NodeDelivery` owns. Nothing here runs on the happy
path of an idempotent node: every write happens only after a redelivery or an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hypha_celery.errors import StoreConflict
from hypha_celery.events import View
from hypha_celery.events import payloads as ev
from hypha_celery.graph import Graph
from hypha_celery.graph.calls import CallRecord
from hypha_celery.runtime.attempts import record_attempt
from hypha_celery.runtime.core import Runtime, awaits
from hypha_celery.runtime.protocol import (
    ErrorJson,
    NodeMessage,
    NodeOutcome,
    StartedJson,
)
from hypha_celery.store import Tx

# Events of an attempt's path, built unvalidated (see payloads.trusted).
_started = ev.trusted(ev.NodeExecutionStarted)
_retrying = ev.trusted(ev.NodeExecutionRetrying)

#: Circuit breaker defaults (hypha): ``THRESHOLD`` failures within the window open it for
#: ``RESET`` s; then it is half-open: ``HALF_OPEN_PROBES`` retries run as probes (a
#: success closes it, a failure re-opens it), the others wait another ``RESET``.
THRESHOLD = 3
RESET = 30.0
HALF_OPEN_PROBES = 1


def deliveries(request: Any) -> int:
    """2 when the broker says this message was delivered before (Redis: the
    ``redelivered`` flag of a restored message; RabbitMQ: the flag or a quorum
    queue's ``x-delivery-count``), else 1.

    Only redeliveries that reach the task body are counted (``node.execution.redelivered``):
    a message bounced by warm restarts without starting is not, so the count is
    how often it *started* and did not finish — a poison message's signature.
    """
    headers = getattr(request, "headers", None) or {}
    count = headers.get("x-delivery-count") if isinstance(headers, dict) else None
    info = getattr(request, "delivery_info", None) or {}
    return 2 if info.get("redelivered") or (isinstance(count, int) and count > 0) else 1


def _while_awaited(rt: Runtime, msg: NodeMessage | NodeOutcome,
                   write: Callable[[Tx, View], None]) -> bool:
    """``write`` on the locked run if it still awaits ``msg``'s execution. False when
    it does not, or when an idempotency key says another delivery already wrote it."""
    awaited = msg.edge_of or msg.execution_id
    try:
        with rt.store.transaction() as tx:
            view = tx.lock(msg.run_id)
            if view is None or not awaits(view, awaited):
                return False
            write(tx, view)
    except StoreConflict:
        return False
    return True


def count_delivery(rt: Runtime, msg: NodeMessage, task: str, queue: str | None
                   ) -> NodeOutcome | None:
    """Record a redelivery. Past the delivery limit, returns the dead-lettered outcome
    to hand the coordinator instead of running the node again."""
    counted = 0

    def write(tx: Tx, view: View) -> None:
        nonlocal counted
        counted = _edge_deliveries(tx, msg) if msg.edge_of is not None else (
            int(view["deliveries"] or 1) + 1)
        tx.emit(msg.run_id, ev.NodeExecutionRedelivered(
            execution_id=msg.execution_id, node_id=msg.node_id, delivery=counted),
            idem=f"{msg.execution_id}:delivery:{counted}")

    if not _while_awaited(rt, msg, write) or counted <= rt.delivery_limit:
        return None
    error: ErrorJson = {"type": "DeliveryLimitExceeded", "class": "unknown",
                        "dead_letter": "delivery_limit",
                        "message": f"delivered {counted} times without completing "
                                   f"(limit {rt.delivery_limit})"}
    return dead_lettered(msg, error, task, queue, attempts=counted, reason="delivery_limit")


def _edge_deliveries(tx: Tx, msg: NodeMessage) -> int:
    """An edge's deliveries: one more than its ``node.execution.redelivered`` events so far
    (the run's counter belongs to the fan-out as a whole)."""
    n = 1
    while tx.event_data(f"{msg.execution_id}:delivery:{n + 1}") is not None:
        n += 1
    return n + 1


def dead_lettered(msg: NodeMessage, error: ErrorJson, task: str, queue: str | None, *,
                  attempts: int, reason: str, duration: float = 0.0,
                  started: StartedJson | None = None,
                  calls: list[CallRecord] | None = None) -> NodeOutcome:
    """An outcome carrying the dead-letter record the coordinator writes."""
    return NodeOutcome(
        msg.run_id, msg.execution_id, msg.node_id, error={**error, "dead_letter": reason},
        duration=duration or 0.0, edge_of=msg.edge_of, index=msg.index, started=started,
        calls=calls or None,
        dead_letter={"task": task, "queue": queue, "args": [msg.args_json()], "reason": reason,
                     "error_class": error.get("class", "unknown"), "attempts": attempts})


def record_retry(rt: Runtime, outcome: NodeOutcome, attempt: int, delay: float,
                 error: ErrorJson, circuit: tuple[str, float] | None) -> bool:
    """Record that a failed attempt is tried again after ``delay`` s: what it did
    (:func:`~.attempts.record_attempt`), ``recovery.circuit.opened`` when ``circuit``
    ``(key, until)`` says the failure opened one, ``node.execution.retrying``. False when
    the run no longer awaits it or another delivery already recorded this retry."""
    run_id, eid = outcome.run_id, outcome.execution_id

    def write(tx: Tx, view: View) -> None:
        record_attempt(tx, run_id, outcome)  # what the failed attempt did stays in the log
        if circuit is not None:
            tx.emit(run_id, ev.RecoveryCircuitOpened(key=circuit[0], until=circuit[1]))
        tx.emit(run_id, _retrying(execution_id=eid, node_id=outcome.node_id, attempt=attempt,
                                  delay=delay, at=time.time() + delay, error=error),
                idem=f"{eid}:retry:{attempt}")

    return _while_awaited(rt, outcome, write)


def begin_effect(rt: Runtime, msg: NodeMessage, attempt: int, worker: str) -> bool:
    """At-most-once: durably record ``node.execution.started`` before the call. False when this
    attempt was started before (a second delivery) or the run no longer awaits it."""
    eid = msg.execution_id

    def write(tx: Tx, view: View) -> None:
        tx.emit(msg.run_id, _started(execution_id=eid, node_id=msg.node_id, attempt=attempt,
                                     worker=worker, at_most_once=True),
                idem=f"{eid}:started:{attempt}")

    return _while_awaited(rt, msg, write)


def envelope_problem(env: Any, graph: Graph, task: str) -> str | None:
    """Why a node message does not have the envelope schema (None: it does)."""
    if not isinstance(env, dict):
        return f"the node envelope must be an object, got {type(env).__name__}"
    for key in ("run_id", "execution_id", "node_id"):
        if not isinstance(env.get(key), str) or not env[key]:
            return f"the node envelope needs a string {key!r}"
    if task != f"{graph.id}.{env['node_id']}":
        return f"node {env['node_id']!r} does not belong to task {task!r}"
    if env.get("edge_of") is not None and not (
            isinstance(env["edge_of"], str) and isinstance(env.get("index"), int)):
        return "an edge envelope needs a string 'edge_of' and an integer 'index'"
    if env.get("index") is not None and not isinstance(env["index"], int):
        return "'index' must be an integer"
    attempt = env.get("attempt")
    if attempt is not None and not (isinstance(attempt, int) and attempt >= 1):
        return "'attempt' must be an integer >= 1"
    return None


def malformed(rt: Runtime, task: str, args: Any, reason: str, message: str) -> int:
    """Dead-letter a message hypha cannot process; it is acked and the queue goes on."""
    run_id = args.get("run_id") if isinstance(args, dict) else None
    eid = args.get("execution_id") if isinstance(args, dict) else None
    return rt.store.add_dead_letter({
        "run_id": run_id if isinstance(run_id, str) else None,
        "execution_id": eid if isinstance(eid, str) else None,
        "task": task, "args": [args], "reason": reason, "error_class": "validation",
        "error": {"type": "InvalidMessage", "message": message[:500], "class": "validation"},
        "attempts": 1})
