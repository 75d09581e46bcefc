"""events/envelope.py: pydantic's private instance layout behind ``_construct``.

These tests fail loudly when pydantic changes the layout ``_construct`` writes (the
``BaseModel`` slots), or when what it builds differs from the public
``Event.model_construct`` in any way a caller can see; and show the public fallback.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hypha_celery.events import envelope
from hypha_celery.events.envelope import Event, _construct, enrich

FIELDS: list[dict[str, Any]] = [
    {"id": "r:1", "type": "run.created", "run_id": "r", "seq": 1, "timestamp": 1.5,
     "user_id": "u", "session_id": "s", "agent_id": "g", "step_id": None, "execution_id": None,
     "correlation_id": "r", "causation_id": None, "idempotency_key": None,
     "payload": {"input": {"q": "é"}}, "checksum": None},
    {"id": "r:7", "type": "node.execution.completed", "run_id": "r", "seq": 7,
     "timestamp": 1767225600.25, "user_id": None, "session_id": None, "agent_id": None,
     "step_id": "2", "execution_id": "r.2.n", "correlation_id": "r.2.n",
     "causation_id": "r:6", "idempotency_key": "r.2.n:done",
     "payload": {"execution_id": "r.2.n", "output": [1, None, {"x": 2.5}]}, "checksum": None},
]


def test_pydantic_keeps_the_layout_construct_writes() -> None:
    assert envelope._FAST, "pydantic's BaseModel slots changed: _construct falls back"


@pytest.mark.parametrize("fields", FIELDS, ids=lambda f: f["type"])
def test_the_same_event_as_model_construct(fields: dict[str, Any]) -> None:
    fast, public = _construct(dict(fields)), Event.model_construct(**fields)
    assert_same(fast, public)


@pytest.mark.parametrize("fields", FIELDS, ids=lambda f: f["type"])
def test_without_the_layout_it_is_model_construct(monkeypatch: pytest.MonkeyPatch,
                                                  fields: dict[str, Any]) -> None:
    monkeypatch.setattr(envelope, "_FAST", False)
    assert_same(_construct(dict(fields)), Event.model_construct(**fields))


def test_enriched_events_validate_and_seal() -> None:
    """What ``enrich`` builds is a valid, frozen envelope that round-trips."""
    (event,) = enrich([("r", 1, "run.created", 1.5, {"input": 1}, None)])
    assert Event.model_validate(event.model_dump()) == event
    assert Event.model_validate_json(event.model_dump_json()) == event
    assert event.sealed().checksum == envelope.checksum(event)
    with pytest.raises(ValidationError, match="frozen"):
        event.seq = 2  # type: ignore[misc]


def assert_same(fast: Event, public: Event) -> None:
    assert type(fast) is type(public) is Event
    assert fast == public
    assert fast.__dict__ == public.__dict__
    assert list(fast.__dict__) == list(public.__dict__)  # field order: dumps, repr
    assert fast.model_fields_set == public.model_fields_set
    assert fast.model_extra == public.model_extra
    assert fast.__pydantic_private__ == public.__pydantic_private__
    assert fast.model_dump() == public.model_dump()
    assert fast.model_dump_json() == public.model_dump_json()
    assert repr(fast) == repr(public)
    assert fast.model_copy(update={"checksum": "x"}) == public.model_copy(update={"checksum": "x"})
    assert envelope.checksum(fast) == envelope.checksum(public)
