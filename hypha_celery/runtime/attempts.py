"""What one attempt of a node execution did, as events: ``node.execution.started`` (at
its real start time), its model and tool calls (``model.call.*`` / ``tool.call.*``,
the request only as its hash) and the facts it recorded (``ctx.record``).

Written in the transaction that records the attempt's end: the coordinator's for the
final attempt, the retry's (:mod:`hypha_celery.runtime.failures`) for one that failed
and is tried again — so a retried attempt's calls stay in the log too.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

from hypha_celery.events import as_kind
from hypha_celery.events import payloads as ev
from hypha_celery.events.payloads import Payload, trusted
from hypha_celery.events.view import View
from hypha_celery.graph.calls import CallRecord
from hypha_celery.runtime.protocol import NodeMessage, NodeOutcome
from hypha_celery.store import EventStore, Tx

# The writers of this module's events, built unvalidated: the node path's (see trusted).
_started = trusted(ev.NodeExecutionStarted)
_model_started = trusted(ev.ModelCallStarted)
_model_completed = trusted(ev.ModelCallCompleted)
_model_failed = trusted(ev.ModelCallFailed)
_tool_started = trusted(ev.ToolCallStarted)
_tool_completed = trusted(ev.ToolCallCompleted)
_tool_failed = trusted(ev.ToolCallFailed)


class _CallIds(TypedDict):
    """What every event of a call says first."""

    call_id: str
    execution_id: str
    step: int | None
    node_id: str
    attempt: int


def record_attempt(tx: Tx, run_id: str, outcome: NodeOutcome) -> None:
    """``node.execution.started`` (when the outcome carries it) and the calls."""
    started = outcome.started
    if started:
        tx.emit(run_id, _started(execution_id=started["execution_id"],
                                 node_id=started["node_id"], attempt=started["attempt"],
                                 worker=started["worker"]), ts=started["at"])
    facts = outcome.facts or []  # [kind, data, calls made before it]
    done = 0
    for n, call in enumerate(outcome.calls or ()):
        while done < len(facts) and facts[done][2] <= n:  # recorded before this call
            kind, data, _ = facts[done]
            tx.append(run_id, as_kind(kind), data)
            done += 1
        record_call(tx, run_id, outcome, call)
    for kind, data, _ in facts[done:]:
        tx.append(run_id, as_kind(kind), data)


def record_call(tx: Tx, run_id: str, outcome: NodeOutcome, call: CallRecord) -> None:
    """``<family>.call.started`` then ``completed`` / ``failed`` at their real times."""
    eid = outcome.execution_id
    parts = eid.split(".")
    ids: _CallIds = {"call_id": call["call_id"], "execution_id": eid,
                     "step": int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None,
                     "node_id": outcome.node_id, "attempt": call.get("attempt", 1)}
    # the fields the call recorded of these (the models' own: a test checks)
    begun: dict[str, Any] = {k: call[k] for k in STARTED_FIELDS  # type: ignore[literal-required]
                             if k in call}
    ended: dict[str, Any] = {k: call[k] for k in ENDED_FIELDS  # type: ignore[literal-required]
                             if k in call}
    name, digest = call["name"], call["request_hash"]
    start: Payload
    end: Payload
    if call["family"] == "memory":
        _memory_call(tx, run_id, ids, call)
        return
    if call["family"] == "model":
        start = _model_started(**ids, model=name, request_hash=digest, **begun)
        end = (_model_failed(**ids, model=name, error=call["error"], **ended) if "error" in call
               else _model_completed(**ids, model=name, output=call["output"], **ended))
    else:
        start = _tool_started(**ids, tool=name, request_hash=digest, **begun)
        end = (_tool_failed(**ids, tool=name, error=call["error"], **ended) if "error" in call
               else _tool_completed(**ids, tool=name, output=call["output"], **ended))
    tx.emit(run_id, start, ts=call["started_at"])
    tx.emit(run_id, end, ts=call["ended_at"])


def _memory_call(tx: Tx, run_id: str, ids: _CallIds, call: CallRecord) -> None:
    """A node's memory call as ``memory.read.*`` / ``memory.write.*``: ids, the scope's
    key, hashes and record references, never text."""
    op = _MemoryIds(operation_id=ids["call_id"], step=ids["step"],
                    execution_id=ids["execution_id"], attempt=ids["attempt"])
    began, ended = call["started_at"], call["ended_at"]
    error = call.get("error")
    if call["name"] == "memory.search":
        tx.emit(run_id, ev.MemoryReadRequested(
            **op, scope=call.get("scope", ""), query_hash=call["request_hash"],
            limit=call.get("limit", 0)), ts=began)
        if error is not None:
            tx.emit(run_id, ev.MemoryReadFailed(**op, error=str(error.get("type")),
                                                reason=str(error.get("message"))), ts=ended)
        else:
            refs = cast(list[ev.MemoryRef], call.get("output") or [])
            tx.emit(run_id, ev.MemoryReadCompleted(**op, records=refs), ts=ended)
        return
    tx.emit(run_id, ev.MemoryWriteRequested(
        **op, scope=call.get("scope", ""), memory_type=call.get("memory_type", ""),
        request_hash=call["request_hash"]), ts=began)
    if error is not None:
        kind, reason = str(error.get("type")), str(error.get("message"))
        tx.emit(run_id, ev.MemoryWriteRejected(
            **op, error=kind, reason=reason,
            review=kind == "MemoryWriteDenied" and "review" in reason), ts=ended)
        return
    out = cast(_Written, call.get("output"))
    record_id, revision = str(out["id"]), int(out["revision"])
    tx.emit(run_id, ev.MemoryWriteValidated(**op, record_id=record_id), ts=ended)
    tx.emit(run_id, ev.MemoryWriteCommitted(**op, record_id=record_id, revision=revision,
                                            reused=bool(out["reused"])), ts=ended)


class _Written(TypedDict):
    """A node's memory write's recorded output (``ctx.remember``)."""

    id: str
    revision: int
    reused: bool


class _MemoryIds(TypedDict):
    operation_id: str
    step: int | None
    execution_id: str
    attempt: int


#: What a call's start and end events carry besides ids (when the call recorded it):
#: a tool's side-effect level; a ``ctx.llm`` call's provider, request size, usage,
#: latency, rate-limit wait and cost; a failed model call's ``error_kind``
#: (:mod:`hypha_celery.graph.calls`).
STARTED_FIELDS = ("side_effect", "provider", "request_bytes")
ENDED_FIELDS = ("usage", "latency_ms", "wait_ms", "cost_usd", "error_kind")


def scheduled_message(store: EventStore, view: View) -> NodeMessage:
    """The awaited node's message (to run it again), from the event that scheduled it."""
    run_id, eid = view["run_id"], view["waiting"]
    for kind in ("node.execution.scheduled", "run.redriven"):
        event = store.last_event(run_id, kind)
        body = event.body if event is not None else None
        if isinstance(body, ev.NodeExecutionScheduled | ev.RunRedriven) \
                and body.execution_id == eid:
            return NodeMessage(run_id, eid, body.node_id, body.input)
    raise LookupError(f"no scheduling event for {eid}")
