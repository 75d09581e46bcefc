"""What one attempt of a node execution did, as events: ``node.execution.started`` (at
its real start time), its model and tool calls (``model.call.*`` / ``tool.call.*``,
the request only as its hash) and the facts it recorded (``ctx.record``).

Written in the transaction that records the attempt's end: the coordinator's for the
final attempt, the retry's (:mod:`hypha_celery.runtime.failures`) for one that failed
and is tried again — so a retried attempt's calls stay in the log too.
"""

from __future__ import annotations

from hypha_celery.events import EventType, as_kind
from hypha_celery.runtime.protocol import CallJson, NodeOutcome
from hypha_celery.store import Tx

#: ``(family, what)`` -> the event type of a model or tool call's start and end.
_CALL_KINDS: dict[tuple[str, str], EventType] = {
    ("model", "started"): "model.call.started", ("model", "completed"): "model.call.completed",
    ("model", "failed"): "model.call.failed", ("tool", "started"): "tool.call.started",
    ("tool", "completed"): "tool.call.completed", ("tool", "failed"): "tool.call.failed"}


def record_attempt(tx: Tx, run_id: str, outcome: NodeOutcome) -> None:
    """``node.execution.started`` (when the outcome carries it) and the calls."""
    started = outcome.started
    if started:
        tx.append(run_id, "node.execution.started",
                  {k: v for k, v in started.items() if k != "at"}, ts=started["at"])
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


def record_call(tx: Tx, run_id: str, outcome: NodeOutcome, call: CallJson) -> None:
    """``<family>.call.started`` then ``completed`` / ``failed`` at their real times."""
    family, eid = call["family"], outcome.execution_id
    parts = str(eid).split(".")
    base = {"call_id": call["call_id"], "execution_id": eid,
            "step": int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None,
            "node_id": outcome.node_id, "attempt": call.get("attempt", 1), family: call["name"]}
    started = {k: call[k] for k in _STARTED_FIELDS if k in call}  # type: ignore[literal-required]
    ended = {k: call[k] for k in _ENDED_FIELDS if k in call}  # type: ignore[literal-required]
    tx.append(run_id, _CALL_KINDS[family, "started"],
              {**base, "request_hash": call["request_hash"], **started},
              ts=call["started_at"])
    if "error" in call:
        tx.append(run_id, _CALL_KINDS[family, "failed"],
                  {**base, "error": call["error"], **ended}, ts=call["ended_at"])
    else:
        tx.append(run_id, _CALL_KINDS[family, "completed"],
                  {**base, "output": call["output"], **ended}, ts=call["ended_at"])


#: What a call's start and end events carry besides ids (when the call recorded it):
#: a tool's side-effect level; a ``ctx.llm`` call's provider, request size, usage,
#: latency, rate-limit wait and cost; a failed model call's ``error_kind``
#: (:mod:`hypha_celery.graph.calls`).
_STARTED_FIELDS = ("side_effect", "provider", "request_bytes")
_ENDED_FIELDS = ("usage", "latency_ms", "wait_ms", "cost_usd", "error_kind")
