"""A turn's ``Response`` / ``TurnError`` are written and read by pydantic adapters, and an
event read by one, as the JSON the hand-written ``to_json`` / ``from_json`` gave (key order
included): each literal is the previous version's output."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from hypha_celery.backends.cli import CliExit
from hypha_celery.backends.error import BackendError
from hypha_celery.backends.event import BackendEvent, InvalidEvent
from hypha_celery.backends.response import EventCoverage, Response, TurnError

RESPONSE = (
    '{"prompt":"hi","text":"t0t1t2","final_message":"t0t1t2","events":[{"kind":"text",'
    '"data":{"text":"t0"},"timestamp_ms":1.5},{"kind":"text","data":{"text":"t1"},'
    '"timestamp_ms":2.5},{"kind":"text","data":{"text":"t2"},"timestamp_ms":3.5}],'
    '"terminal":{"kind":"result","data":{"text":"t0t1t2","session_id":"s"},'
    '"timestamp_ms":9.0},"event_coverage":{"mode":"exact","observed_events":4,'
    '"retained_events":3,"omitted_events":0,"retained_bytes":40,"first_omission":null},'
    '"usage":{"input_tokens":3},"duration_ms":12.5,"metadata":{"k":[1]},"session_id":"s",'
    '"model":"m"}')


def text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_a_response_is_written_and_read_as_before() -> None:
    events = tuple(BackendEvent("text", {"text": f"t{i}"}, 1.5 + i) for i in range(3))
    coverage: EventCoverage = {"mode": "exact", "observed_events": 4, "retained_events": 3,
                               "omitted_events": 0, "retained_bytes": 40,
                               "first_omission": None}
    response = Response("hi", "t0t1t2", "t0t1t2", events,
                        BackendEvent("result", {"text": "t0t1t2", "session_id": "s"}, 9.0),
                        coverage, {"input_tokens": 3}, 12.5, {"k": [1]}, "s", "m")
    assert text(response.to_json()) == RESPONSE
    assert Response.from_json(json.loads(RESPONSE)) == response


def test_a_turn_error_is_written_as_before() -> None:
    assert text(TurnError("task_crashed", {"exception": "ValueError"}).to_json()) == (
        '{"reason":"task_crashed","info":{"exception":"ValueError"},"terminal":null}')
    error = TurnError("error", {}, BackendEvent("error", {"reason": "x"}, 2.0))
    assert text(error.to_json()) == ('{"reason":"error","info":{},"terminal":{"kind":"error",'
                                     '"data":{"reason":"x"},"timestamp_ms":2.0}}')


@pytest.mark.parametrize("doc", [
    {"kind": "t", "data": {}, "timestamp_ms": "3"},  # not coerced
    {"kind": "t", "data": {}, "timestamp_ms": True},
    {"kind": "t", "data": [], "timestamp_ms": 1.0},
    {"kind": "t", "data": {}, "timestamp_ms": 1.0, "extra": 1},
    {"kind": 3, "data": {}, "timestamp_ms": 1.0},
    [1],
])
def test_an_event_of_another_shape_is_refused(doc: Any) -> None:
    with pytest.raises(InvalidEvent):
        BackendEvent.from_json(doc)


ERROR = ('{"provider":"openai","kind":"rate_limited","retryable":true,"status":429,'
         '"retry_after":"2.5"}')
CLI_EXIT = ('{"provider":"claude","kind":"cli_exit","retryable":false,"status":null,'
            '"retry_after":null,"exit_code":3}')


def test_a_backend_error_is_written_and_read_as_before() -> None:
    error = BackendError("openai", "rate_limited", True, 429, "2.5")
    assert text(error.to_json()) == ERROR
    back = BackendError.from_json(json.loads(ERROR))
    assert (back.provider, back.kind, back.retryable, back.status, back.retry_after) == (
        "openai", "rate_limited", True, 429, "2.5")
    assert text(CliExit("claude", 3).to_json()) == CLI_EXIT
    assert BackendError.from_json(json.loads(CLI_EXIT)).kind == "cli_exit"  # exit_code ignored
    with pytest.raises(ValidationError):
        BackendError.from_json({"provider": "openai", "kind": "x"})
