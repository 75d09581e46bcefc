"""The events of a delivery's failures (``runtime.failures``) are payload models, stored
as the JSON the hand-built dicts were, key order included: each literal below is what the
previous version stored for the same calls."""

from __future__ import annotations

import json
import types
import uuid

import pytest

from hypha_celery.events import RunStatus, new_view
from hypha_celery.events.view import ErrorJson
from hypha_celery.runtime import failures, lifecycle
from hypha_celery.runtime.protocol import NodeMessage, NodeOutcome
from hypha_celery.store import EventStore

PREVIOUS = [
    '["node.execution.started",{"execution_id":"R.1","node_id":"n","attempt":1,'
    '"worker":"w:1","at_most_once":true}]',
    '["node.execution.redelivered",{"execution_id":"R.1","node_id":"n","delivery":2}]',
    '["recovery.circuit.opened",{"key":"g.n","until":130.0}]',
    '["node.execution.retrying",{"execution_id":"R.1","node_id":"n","attempt":1,"delay":2.5,'
    '"at":102.5,"error":{"type":"E","class":"transient","message":"m"}}]',
]


def test_failure_events_are_stored_as_they_always_were(
        store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = uuid.uuid4().hex
    with store.transaction() as tx:
        tx.create(new_view(run_id))
        lifecycle.record(tx, run_id, "run.created", {"graph_id": "g"})
        view = tx.lock(run_id)
        assert view is not None
        view["status"], view["waiting"] = RunStatus.RUNNING, f"{run_id}.1"
    rt = types.SimpleNamespace(store=store, delivery_limit=1)
    msg = NodeMessage(run_id, f"{run_id}.1", "n", None)
    assert failures.begin_effect(rt, msg, 1, "w:1")
    assert failures.count_delivery(rt, msg, "g.n", "hypha.nodes") is not None
    error: ErrorJson = {"type": "E", "class": "transient", "message": "m"}
    monkeypatch.setattr(failures.time, "time", lambda: 100.0)
    outcome = NodeOutcome(run_id, f"{run_id}.1", "n", error=error)
    assert failures.record_retry(rt, outcome, 1, 2.5, error, ("g.n", 130.0))
    stored = [json.dumps([e.type, e.payload], separators=(",", ":"))
              for e in store.events(run_id)[1:]]
    assert stored == [line.replace("R.1", f"{run_id}.1") for line in PREVIOUS]
