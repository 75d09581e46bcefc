from __future__ import annotations

import json
import math
from typing import Any

import pytest

from hypha_celery.backends import TERMINAL_KINDS, BackendEvent, InvalidEvent


def test_json_round_trip() -> None:
    event = BackendEvent.new("text", {"text": "hi", "message_boundary": True,
                                      "n": [1, {"a": None}]})
    doc = json.loads(json.dumps(event.to_json()))
    assert doc == {"kind": "text", "data": event.data, "timestamp_ms": event.timestamp_ms}
    assert BackendEvent.from_json(doc) == event


def test_new_defaults_and_monotonic_ms() -> None:
    a = BackendEvent.new("session")
    b = BackendEvent.new("usage", {"input_tokens": 1, "output_tokens": 2})
    assert a.data == {} and b.timestamp_ms >= a.timestamp_ms > 0


@pytest.mark.parametrize(("kind", "terminal"), [
    ("result", True), ("error", True), ("text", False), ("session", False),
    ("tool_use", False), ("tool_result", False), ("usage", False), ("custom.thing", False)])
def test_terminal(kind: str, terminal: bool) -> None:
    assert BackendEvent.new(kind).terminal is terminal
    assert (kind in TERMINAL_KINDS) is terminal


def test_size_is_compact_json_of_data() -> None:
    # the project's JSON size (graph/jsonsafe.py): compact, ASCII-escaped
    assert BackendEvent.new("text", {"text": "é"}).size == len('{"text":"\\u00e9"}')


@pytest.mark.parametrize("data", [
    {"x": object()}, {"x": math.nan}, {"x": (1, 2)}, {1: "int key"}, {"x": {2: "nested"}},
    {"x": b"bytes"}])
def test_non_json_data_is_rejected(data: dict[Any, Any]) -> None:
    with pytest.raises(InvalidEvent):
        BackendEvent.new("text", data)


@pytest.mark.parametrize("args", [("", {}, 1.0), (3, {}, 1.0), ("text", [], 1.0),
                                  ("text", {}, math.inf), ("text", {}, True), ("text", {}, "1")])
def test_bad_fields_are_rejected(args: tuple[Any, Any, Any]) -> None:
    with pytest.raises(InvalidEvent):
        BackendEvent(*args)


@pytest.mark.parametrize("doc", [None, [], {"kind": "text", "data": {}},
                                 {"kind": "text", "data": {}, "timestamp_ms": 1, "x": 1}])
def test_from_json_shape(doc: object) -> None:
    with pytest.raises(InvalidEvent):
        BackendEvent.from_json(doc)


def test_invalid_event_is_a_hypha_type_error() -> None:
    from hypha_celery.errors import HyphaRuntimeError

    assert issubclass(InvalidEvent, HyphaRuntimeError) and issubclass(InvalidEvent, TypeError)


def test_the_old_name_event_still_resolves_with_a_deprecation_warning() -> None:
    import hypha_celery.backends as backends

    with pytest.warns(DeprecationWarning, match="renamed to BackendEvent"):
        assert backends.Event is BackendEvent
    with pytest.raises(AttributeError):
        backends.NoSuchName  # noqa: B018
