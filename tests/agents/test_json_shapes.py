"""Targets and channel messages are written and read by pydantic adapters as the JSON the
hand-written ``to_json`` / ``from_json`` gave (key order included): each literal is the
previous version's output, as stored requests and outbox rows hold it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from celery import signature
from pydantic import ValidationError

from hypha_celery.agents.channels import (
    Channel,
    Completion,
    SignatureTarget,
    Streamed,
    target_from,
)
from hypha_celery.agents.doc import OnHalt, Origin, Request
from hypha_celery.agents.options import Limits

SIGNATURE = ('{"signature":{"task":"app.done","args":[1],"kwargs":{"k":"v"},'
             '"options":{"queue":"q"},"subtask_type":null,"immutable":false}}')
PREVIOUS: list[tuple[Any, str]] = [
    (Channel("abc"), '{"channel":"abc"}'),
    (SignatureTarget(dict(signature("app.done", args=(1,), kwargs={"k": "v"}, queue="q"))),
     SIGNATURE),
    (Completion("a1", "ref1", {"ok": {"text": "hi"}}),
     '{"type":"completion","agent":"a1","ref":"ref1","outcome":{"ok":{"text":"hi"}}}'),
    (Completion("a1", "r2", {"error": "halted", "info": {}}),
     '{"type":"completion","agent":"a1","ref":"r2","outcome":{"error":"halted","info":{}}}'),
    (Streamed("a1", "ref1", {"kind": "text", "data": {"t": "x"}}),
     '{"type":"event","agent":"a1","ref":"ref1","event":{"kind":"text","data":{"t":"x"}}}'),
]


@pytest.mark.parametrize(("value", "previous"), PREVIOUS)
def test_written_as_before(value: Any, previous: str) -> None:
    assert json.dumps(value.to_json(), separators=(",", ":")) == previous


def test_read_as_before() -> None:
    assert target_from({"channel": "abc"}) == Channel("abc")
    assert target_from(json.loads(SIGNATURE)) == SignatureTarget(
        json.loads(SIGNATURE)["signature"])
    assert target_from(None) is None
    assert Completion.from_json(json.loads(PREVIOUS[2][1])) == PREVIOUS[2][0]


@pytest.mark.parametrize("bad", [{"channel": 3}, {"signature": "app.done"}, {}])
def test_a_target_of_another_shape_is_a_validation_error(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        target_from(bad)


LIMITS = ('{"watchdog_ms":5,"max_tell_results":100,"max_tell_result_bytes":8388608,'
          '"max_events_per_turn":1000,"max_event_bytes_per_turn":1048576,'
          '"event_retention":"lossless","max_pending_prompts":1000,'
          '"max_pending_prompt_bytes":1048576,"max_pending_notifications":1000,'
          '"max_pending_notification_bytes":1048576}')


def test_an_agents_limits_are_written_and_read_as_before() -> None:
    """(An agent doc's ``limits``.)"""
    limits = Limits(watchdog_ms=5, event_retention="lossless")
    assert json.dumps(limits.to_json(), separators=(",", ":")) == LIMITS
    assert Limits.from_json(json.loads(LIMITS)) == limits
    with pytest.raises(ValidationError):
        Limits.from_json({"watchdog_ms": "soon"})


REQUESTS = [
    (Request("ref1", Origin.ASK, "hello", 1, 5, Channel("c1"), None, OnHalt.QUEUE, "lease1"),
     '{"ref":"ref1","origin":"ask","prompt":"hello","attempt":1,"bytes":5,'
     '"completion":{"channel":"c1"},"stream_to":null,"on_halt":"queue","caller":"lease1"}'),
    (Request("ref2", Origin.TELL, "p", 2, 1, SignatureTarget({"task": "t", "args": []}),
             Channel("s"), OnHalt.FAIL),
     '{"ref":"ref2","origin":"tell","prompt":"p","attempt":2,"bytes":1,"completion":'
     '{"signature":{"task":"t","args":[]}},"stream_to":{"channel":"s"},"on_halt":"fail"}'),
    (Request("ref3", Origin.SELF_CHAIN, "", 1, 0),
     '{"ref":"ref3","origin":"self_chain","prompt":"","attempt":1,"bytes":0,'
     '"completion":null,"stream_to":null,"on_halt":"queue"}'),
]


@pytest.mark.parametrize(("request_", "previous"), REQUESTS)
def test_a_request_is_written_and_read_as_before(request_: Request, previous: str) -> None:
    """(A prompt-lane item, the self-chain slot, a current turn's request part.)"""
    assert json.dumps(request_.to_json(), separators=(",", ":")) == previous
    assert Request.from_json(json.loads(previous)) == request_


def test_a_request_without_on_halt_queues() -> None:
    doc = {"ref": "r", "origin": "event", "prompt": "x", "attempt": 1, "bytes": 1,
           "on_halt": None, "stage": "queued"}
    assert Request.from_json(doc).on_halt is OnHalt.QUEUE
