"""An attempt's events (``runtime.attempts``): built as payload models, stored as the JSON
the hand-built dicts always were (key order included), every measure a call recorded
kept."""

from __future__ import annotations

import uuid

from hypha_celery.events import new_view
from hypha_celery.events.payloads import (
    ModelCallFailed,
    ModelCallStarted,
    ToolCallCompleted,
    ToolCallStarted,
)
from hypha_celery.graph.calls import CallRecord
from hypha_celery.runtime import lifecycle
from hypha_celery.runtime.attempts import ENDED_FIELDS, STARTED_FIELDS, record_attempt
from hypha_celery.runtime.protocol import NodeOutcome
from hypha_celery.store import EventStore

MODEL: CallRecord = {
    "call_id": "r.3:m0", "family": "model", "name": "gpt", "attempt": 2, "request_hash": "ab",
    "started_at": 10.0, "ended_at": 11.0, "error": {"type": "RateLimited", "message": "slow"},
    "provider": "openai", "request_bytes": 120, "usage": {"input_tokens": 3},
    "latency_ms": 1000.0, "wait_ms": 5.0, "cost_usd": None, "error_kind": "rate_limited"}
MODEL_OK: CallRecord = {
    "call_id": "r.3:m2", "family": "model", "name": "gpt", "attempt": 2, "request_hash": "ef",
    "started_at": 12.0, "ended_at": 12.5, "output": "hi", "usage": {"output_tokens": 1},
    "latency_ms": 500.0, "cost_usd": 0.5}
TOOL: CallRecord = {
    "call_id": "r.3:t1", "family": "tool", "name": "search", "attempt": 2,
    "request_hash": "cd", "side_effect": "read", "started_at": 11.0, "ended_at": 11.5,
    "output": {"hits": [1, 2]}}


def test_an_attempt_is_stored_as_the_json_it_always_was(store: EventStore) -> None:
    run_id = uuid.uuid4().hex
    with store.transaction() as tx:
        tx.create(new_view(run_id))
        lifecycle.record(tx, run_id, "run.created", {"graph_id": "g"})
        outcome = NodeOutcome(run_id, f"{run_id}.3", "n", update={"x": 1},
                              calls=[MODEL, TOOL, MODEL_OK],
                              started={"execution_id": f"{run_id}.3", "node_id": "n",
                                       "attempt": 2, "worker": "w:1", "at": 9.0})
        record_attempt(tx, run_id, outcome)
    ids = {"execution_id": f"{run_id}.3", "step": 3, "node_id": "n", "attempt": 2}
    stored = [(e.type, e.ts, e.payload) for e in store.events(run_id)][1:]
    assert [list(p) for _, _, p in stored] == [list(p) for _, _, p in previous(run_id, ids)]
    assert stored == previous(run_id, ids)


def previous(run_id: str, ids: dict[str, object]) -> list[tuple[str, float, dict[str, object]]]:
    """What the previous version stored for the attempt, key order included."""
    return [
        ("node.execution.started", 9.0,
         {"execution_id": f"{run_id}.3", "node_id": "n", "attempt": 2, "worker": "w:1"}),
        ("model.call.started", 10.0,
         {"call_id": "r.3:m0", **ids, "model": "gpt", "request_hash": "ab",
          "provider": "openai", "request_bytes": 120}),
        ("model.call.failed", 11.0,
         {"call_id": "r.3:m0", **ids, "model": "gpt",
          "error": {"type": "RateLimited", "message": "slow"}, "usage": {"input_tokens": 3},
          "latency_ms": 1000.0, "wait_ms": 5.0, "cost_usd": None,
          "error_kind": "rate_limited"}),
        ("tool.call.started", 11.0,
         {"call_id": "r.3:t1", **ids, "tool": "search", "request_hash": "cd",
          "side_effect": "read"}),
        ("tool.call.completed", 11.5,
         {"call_id": "r.3:t1", **ids, "tool": "search", "output": {"hits": [1, 2]}}),
        ("model.call.started", 12.0,
         {"call_id": "r.3:m2", **ids, "model": "gpt", "request_hash": "ef"}),
        ("model.call.completed", 12.5,
         {"call_id": "r.3:m2", **ids, "model": "gpt", "output": "hi",
          "usage": {"output_tokens": 1}, "latency_ms": 500.0, "cost_usd": 0.5}),
    ]


def test_every_measure_a_call_records_is_a_field_of_its_events() -> None:
    """The measures pass through by name: one a model lacks would be dropped."""
    assert set(STARTED_FIELDS) <= ModelCallStarted.model_fields.keys()
    assert set(ENDED_FIELDS) <= ModelCallFailed.model_fields.keys()
    assert "side_effect" in ToolCallStarted.model_fields
    assert set(ENDED_FIELDS) - {"error_kind"} <= ToolCallCompleted.model_fields.keys()
