"""What an operator does by hand: redrive a dead letter, release or fail a
quarantined run. Each is one transaction on the locked run and an event, which names
who acted (``by``) when the caller says.

A held run (parked, quarantined) is not subject to its deadline while a human
decides; redrive and release give it a fresh ``execution_timeout``."""

from __future__ import annotations

import time
from typing import Any, TypedDict

from hypha_celery.errors import FailureReason, NotRedrivable, RunNotFound
from hypha_celery.events import RunStatus, View
from hypha_celery.events import payloads as ev
from hypha_celery.jsontypes import json_object
from hypha_celery.runtime import canvas, lifecycle
from hypha_celery.runtime.attempts import scheduled_message
from hypha_celery.runtime.coordinator import fanout_calls, node_call, publish_fanout, terminal
from hypha_celery.runtime.core import Runtime, awaits
from hypha_celery.runtime.protocol import NodeMessage
from hypha_celery.store import Tx
from hypha_celery.store.recovery import DeadLetterRow

#: Dead letters whose body was never accepted (a bad or missing signature, a body past
#: the bound): what is kept is a preview, not a message to publish again.
UNSENDABLE = frozenset({"bad_signature", "unsigned", "message_too_large"})


def redrive(rt: Runtime, dead_letter_id: int, by: str | None = None) -> str:
    """Re-enqueue a dead-lettered message. A run parked on it continues with a new
    execution of the node; a message whose run still awaits it (a malformed or
    unknown-task message fixed by a deploy) is published again as it was.
    Returns the execution id (or task id) published."""
    record = rt.store.dead_letter(dead_letter_id)
    if record is None:
        raise NotRedrivable(f"no dead letter {dead_letter_id}")
    if record["status"] != "open":
        raise NotRedrivable(f"dead letter {dead_letter_id} was already {record['status']}")
    if record["reason"] in UNSENDABLE:
        raise NotRedrivable(f"dead letter {dead_letter_id} was refused unread "
                            f"({record['reason']}): only its first characters were kept, "
                            "there is no message to send again")
    if record["run_id"] is None:
        return _republish(rt, record)
    with rt.store.transaction() as tx:
        view = tx.lock(record["run_id"])
        if view is None:
            raise RunNotFound(f"no run {record['run_id']!r} in the event store")
        parked = view["parked"]
        if view["status"] == RunStatus.PARKED and parked is not None \
                and parked["dead_letter_id"] == dead_letter_id:
            return _unpark(tx, rt, view, parked["execution_id"], record, by)
        if record["execution_id"] and awaits(view, record["execution_id"]):
            rt.store.mark_redriven(dead_letter_id, tx)
            tx.emit(view["run_id"], ev.RecoveryDeadLetterRedriven(
                dead_letter_id=dead_letter_id, execution_id=record["execution_id"], **_by(by)))
            tx.after_commit(lambda: None if _send(rt, record) else None)
            return str(record["execution_id"])
        raise NotRedrivable(
            f"run {record['run_id']} is {view['status']} and does not await this message: "
            "a redrive would be stale (use on_dead_letter='park' to hold runs for a redrive)")


class _By(TypedDict, total=False):
    by: str


def _by(by: str | None) -> _By:
    """``by`` as a payload's keyword: none when no one is named (the key is not written)."""
    return {} if by is None else {"by": by}


def _unpark(tx: Tx, rt: Runtime, view: View, parked_id: str, record: DeadLetterRow,
            by: str | None) -> str:
    graph = rt.graphs.get(view["graph_id"] or "")
    if graph is None:
        raise NotRedrivable(f"graph {view['graph_id']!r} is not registered here")
    args = record["args"]
    env = json_object(args[0] if isinstance(args, list) and args else None)  # the message
    node_id = str(env["node_id"])
    eid = f"{parked_id}.r{record['id']}"
    rt.store.mark_redriven(record["id"], tx)
    lifecycle.emit(tx, view["run_id"], ev.RunRedriven(
        dead_letter_id=record["id"], execution_id=eid, node_id=node_id, input=env.get("input"),
        deadline=time.time() + graph.execution_timeout, **_by(by)))
    call = node_call(rt, graph, NodeMessage(view["run_id"], eid, node_id, env.get("input")))
    tx.after_commit(lambda: canvas.step(rt.app, call))
    return eid


def _republish(rt: Runtime, record: DeadLetterRow) -> str:
    if record["task"] not in rt.app.tasks:
        raise NotRedrivable(f"task {record['task']!r} is not registered here")
    if not rt.store.mark_redriven(record["id"]):
        raise NotRedrivable(f"dead letter {record['id']} is no longer open")
    return _send(rt, record)


def _send(rt: Runtime, record: DeadLetterRow) -> str:
    args = record["args"] if isinstance(record["args"], list) else [record["args"]]
    result = rt.app.send_task(record["task"], args=args, task_id=record["execution_id"],
                              queue=record["queue"] or None)
    return str(result.id)


def _quarantined(tx: Tx, run_id: str) -> View:
    view = tx.lock(run_id)
    if view is None:
        raise RunNotFound(f"no run {run_id!r} in the event store")
    if view["status"] != RunStatus.QUARANTINED:
        raise NotRedrivable(f"run {run_id} is {view['status']}, not quarantined")
    return view


def release(rt: Runtime, run_id: str, by: str | None = None) -> None:
    """A human checked that the quarantined node's effect did not happen: run the
    node again, as its next attempt.

    Both kinds of quarantine leave the run awaiting the execution (``view["waiting"]``):
    the supervisor's (the worker died: no outcome came) and the coordinator's (the node's
    error said its effect is unknown: its outcome was not applied, only what the attempt
    did was recorded), so ``run.released`` needs to re-await nothing."""
    with rt.store.transaction() as tx:
        view = _quarantined(tx, run_id)
        graph = rt.graphs.get(view["graph_id"] or "")
        if graph is None:
            raise NotRedrivable(f"graph {view['graph_id']!r} is not registered here")
        q = view["quarantine"]
        assert q is not None
        attempt = int(q["attempt"] or 1) + 1
        lifecycle.emit(tx, run_id, ev.RunReleased(
            execution_id=q["execution_id"], attempt=attempt, action="rerun",
            deadline=time.time() + graph.execution_timeout, **_by(by)))
        tx.after_commit(_rerun(rt, view, graph, q["execution_id"], attempt))


def _rerun(rt: Runtime, view: View, graph: Any, eid: str, attempt: int) -> Any:
    run_id, fid = view["run_id"], view["waiting"]
    if view["fanout"] and fid is not None:
        event = rt.store.last_event(run_id, "node.fanout.scheduled")
        assert event is not None
        fanout = event.body_as(ev.NodeFanoutScheduled)
        edges = [dict(e, attempt=attempt) if e["execution_id"] == eid else e
                 for e in fanout.edges]
        calls = fanout_calls(rt, graph, run_id, fid, edges)
        return lambda: publish_fanout(rt, graph, run_id, fid, fanout.reducer, calls)
    call = node_call(rt, graph, scheduled_message(rt.store, view).with_attempt(attempt))
    return lambda: canvas.step(rt.app, call)


def fail_quarantined(rt: Runtime, run_id: str, message: str, by: str | None = None) -> None:
    """End a quarantined run ``run.failed`` (reason ``quarantined``)."""
    with rt.store.transaction() as tx:
        view = _quarantined(tx, run_id)
        terminal(tx, rt, view, ev.RunFailed(reason=FailureReason.QUARANTINED.value,
                                            message=message[:500], **_by(by)))
