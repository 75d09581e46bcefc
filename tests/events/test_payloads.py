"""One payload model per event type, and the log's JSON unchanged by them.

``recorded_payloads.jsonl`` holds payloads the runtime wrote before the models existed
(``origin: recorded``: captured from the test suites' runs at commit 09616fe, one line
per distinct set of keys, at most three per type) and, for the types no writer of this
package appends or no suite reached, one written from the writer's code (``origin:
writer``). Every type has at least one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from hypha_celery.errors import NotTheLifecycleWriter, UnknownEventKind
from hypha_celery.events import KINDS, PAYLOADS, Event, new_view, payload_as, payload_of
from hypha_celery.events.envelope import canonical
from hypha_celery.events.payloads import (
    FsmStateEntered,
    MemoryReadCompleted,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallStarted,
    NodeExecutionScheduled,
    RunCreated,
    RunFailed,
    parse_payload,
    trusted,
)
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore

RECORDED = [json.loads(line) for line in
            (Path(__file__).parent / "recorded_payloads.jsonl").read_text().splitlines()]
#: Types that no writer of this package appends: their models keep unknown fields.
RESERVED = {"message.enqueued", "message.delivered", "message.retrying",
            "message.acknowledged", "message.failed", "message.dead_lettered",
            "memory.read.completed"}


def _ids(row: dict[str, Any]) -> str:
    return str(row["type"])


def test_every_event_type_has_exactly_one_payload_model() -> None:
    assert set(PAYLOADS) == set(KINDS)
    assert all(model.kind == kind for kind, model in PAYLOADS.items())
    models = list(PAYLOADS.values())
    assert len(set(models)) == len(models)  # no model serves two types


def test_the_recorded_payloads_cover_every_type() -> None:
    assert {row["type"] for row in RECORDED} == set(KINDS)


@pytest.mark.parametrize("row", RECORDED, ids=_ids)
def test_a_recorded_payload_round_trips_unchanged(row: dict[str, Any]) -> None:
    kind, data = row["type"], row["payload"]
    validated = parse_payload(kind, data)
    assert type(validated) is PAYLOADS[kind]
    assert validated.dump() == data
    assert canonical(validated.dump()) == canonical(data)
    trusted = payload_of(kind, data)
    assert trusted.dump() == data and trusted == validated


@pytest.mark.parametrize("kind", sorted(KINDS - RESERVED))
def test_an_unknown_field_is_rejected(kind: str) -> None:
    data = next(row["payload"] for row in RECORDED if row["type"] == kind)
    with pytest.raises(pydantic.ValidationError, match="extra_forbidden|Extra inputs"):
        parse_payload(kind, {**data, "exec_id": "r.1"})


def test_a_misspelt_keyword_is_rejected_by_the_writer() -> None:
    with pytest.raises(pydantic.ValidationError):
        RunFailed(reason="node_failed", mesage="typo")  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError):
        NodeExecutionScheduled(execution_id="r.1", node_id="a", step="one")  # type: ignore[arg-type]


def test_reserved_types_keep_their_extra_fields() -> None:
    data = {"target": "working", "step": 2, "hits": 3}
    assert parse_payload("memory.read.completed", data).dump() == data
    assert MemoryReadCompleted(target="working", hits=3).dump() == {"target": "working",
                                                                    "hits": 3}


def test_dump_writes_only_what_the_writer_set() -> None:
    """A field left at its default is not written (the dicts never wrote it); an explicit
    ``None`` is."""
    assert RunFailed(reason="r").dump() == {"reason": "r"}
    assert RunCreated(graph_id="g", user_id=None).dump() == {"graph_id": "g", "user_id": None}


def test_json_names_that_are_python_keywords() -> None:
    entered = FsmStateEntered(workflow="w", state="B", from_="A", step=1)
    assert entered.dump() == {"workflow": "w", "state": "B", "from": "A", "step": 1}
    assert payload_as(FsmStateEntered, "fsm.state.entered", entered.dump()).from_ == "A"


def test_model_call_failed_carries_the_error_kind() -> None:
    failed = ModelCallFailed(call_id="r.1:m0", error={"type": "BackendError", "message": "x"},
                             error_kind="rate_limited")
    assert parse_payload("model.call.failed", failed.dump()).dump()["error_kind"] == \
        "rate_limited"


def test_the_envelope_gives_its_body() -> None:
    event = Event(run_id="r", seq=1, type="run.created", timestamp=1.0,
                  payload={"graph_id": "g", "user_id": "u1", "input": {"q": 1}})
    body = event.body_as(RunCreated)
    assert (body.graph_id, body.user_id, body.input) == ("g", "u1", {"q": 1})
    assert isinstance(event.body, RunCreated)
    with pytest.raises(UnknownEventKind):
        event.body_as(RunFailed)
    with pytest.raises(UnknownEventKind):
        payload_of("run.exploded", {})


def test_emit_stores_the_json_the_dict_writer_stored(tmp_path: Path) -> None:
    """``Tx.emit`` and ``lifecycle.emit`` append the model's JSON: the rows read back
    are the dicts, and a view folded from them is the one the writer's fold made."""
    store = EventStore(f"sqlite:///{tmp_path / 'e.db'}")
    created = RunCreated(graph_id="g", input={"q": "x"}, user_id="u1", session_id=None,
                         lane=None, deadline=None, max_steps=5, notify=None,
                         idempotency_key=None)
    with store.transaction() as tx:
        tx.create(new_view("r"))
        lifecycle.emit(tx, "r", created)
        tx.emit("r", NodeExecutionScheduled(execution_id="r.1", node_id="a", input=None,
                                           step=1))
    events = store.events("r")
    assert [e.payload for e in events] == [
        created.dump(), {"execution_id": "r.1", "node_id": "a", "input": None, "step": 1}]
    assert store.rebuild("r") == store.get("r")
    assert store.get("r")["user_id"] == "u1"


def test_emit_refuses_a_lifecycle_payload_from_anyone_but_the_lifecycle_writer(
        tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'w.db'}")
    with store.transaction() as tx:
        tx.create(new_view("r"))
        lifecycle.emit(tx, "r", RunCreated(graph_id="g"))
    with pytest.raises(NotTheLifecycleWriter), store.transaction() as tx:
        tx.lock("r")
        tx.emit("r", RunFailed(reason="x"))
    with pytest.raises(NotTheLifecycleWriter):
        store.emit("r", RunFailed(reason="x"))
    assert [e.type for e in store.events("r")] == ["run.created"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_trusted_builds_what_the_validated_model_builds(kind: str) -> None:
    """``trusted(Model)(...)``: no validation, the same model (fields set, defaults, JSON)."""
    rows = [r for r in RECORDED if r["type"] == kind]
    model = PAYLOADS[kind]
    for row in rows:
        checked = model.model_validate(row["payload"])
        values = {name: getattr(checked, name) for name in checked.model_fields_set}
        built = trusted(model)(**values)  # a reserved type: its extra fields too
        assert type(built) is model
        assert built.dump() == checked.dump() == row["payload"]
        assert built.model_fields_set == checked.model_fields_set
        assert built == checked


def test_trusted_fills_defaults_and_does_not_validate() -> None:
    started = trusted(ModelCallStarted)(call_id="c", model="m")
    assert (started.attempt, started.provider) == (1, None)
    assert started.dump() == {"call_id": "c", "model": "m"}
    odd = trusted(ModelCallCompleted)(usage={"input_tokens": 1.5})  # type: ignore[dict-item]
    assert odd.dump() == {"usage": {"input_tokens": 1.5}}  # a validated model refuses it
    with pytest.raises(pydantic.ValidationError):
        ModelCallCompleted(usage={"input_tokens": 1.5})  # type: ignore[dict-item]
