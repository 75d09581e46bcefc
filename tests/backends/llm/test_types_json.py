"""A model call's request and result are written (and read) by pydantic adapters as the
JSON the hand-written ``to_json`` / ``from_json`` gave, key order included: each literal is
the previous version's output. The request's JSON is what a recorded call's request
hash is taken of, the result's a ``model.call.completed``'s output: a replay of a run
recorded before compares against them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from hypha_celery.backends.llm.ratelimit import LimiterStats
from hypha_celery.backends.llm.types import (
    LLMRequest,
    LLMResult,
    Message,
    ToolCall,
    ToolDecl,
    Usage,
)
from hypha_celery.graph.calls import request_hash


def text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


MESSAGES: tuple[Message, ...] = (
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi", "name": "bob"},  # type: ignore[typeddict-unknown-key]
    {"role": "assistant", "content": "",
     "tool_calls": [{"id": "c1", "name": "f", "arguments": {"a": 1}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
)
REQUEST = (
    '{"model":"gpt-x","messages":[{"role":"system","content":"be brief"},{"role":"user",'
    '"content":"hi","name":"bob"},{"role":"assistant","content":"","tool_calls":[{"id":"c1",'
    '"name":"f","arguments":{"a":1}}]},{"role":"tool","tool_call_id":"c1","content":"42"}],'
    '"tools":[{"name":"f","description":"adds","parameters":{"type":"object","properties":'
    '{"a":{"type":"integer"}}}}],"options":{"temperature":0.5,"api":"chat"}}')
RESULT = (
    '{"text":"done","tool_calls":[{"id":"c2","name":"g","arguments":{"q":[1,null]}}],'
    '"usage":{"input_tokens":10,"output_tokens":3,"cache_read_tokens":2,'
    '"cache_write_tokens":1},"stop_reason":"tool_use","model":"gpt-x","response_id":"resp_1"}')
EMPTY = ('{"text":"","tool_calls":[],"usage":{"input_tokens":0,"output_tokens":0,'
         '"cache_read_tokens":0,"cache_write_tokens":0},"stop_reason":null,"model":"",'
         '"response_id":null}')


def test_a_request_is_written_as_before_every_message_key_kept() -> None:
    decl = ToolDecl("f", "adds", {"type": "object", "properties": {"a": {"type": "integer"}}})
    request = LLMRequest("gpt-x", MESSAGES, (decl,), {"temperature": 0.5, "api": "chat"})
    assert text(request.to_json()) == REQUEST
    # so the hash a recorded call carries is the one it always was
    assert request_hash(request.to_json()) == request_hash(json.loads(REQUEST))


def test_a_result_is_written_and_read_as_before() -> None:
    result = LLMResult("done", (ToolCall("c2", "g", {"q": [1, None]}),), Usage(10, 3, 2, 1),
                       "tool_use", "gpt-x", "resp_1")
    assert text(result.to_json()) == RESULT
    assert LLMResult.from_json(json.loads(RESULT)) == result
    assert text(Usage(5, 6).to_json()) == (
        '{"input_tokens":5,"output_tokens":6,"cache_read_tokens":0,"cache_write_tokens":0}')


@pytest.mark.parametrize("doc", [
    {"text": None, "tool_calls": None, "usage": None, "model": None},
    {"text": "", "usage": {"input_tokens": None, "other": 1}},
])
def test_nulls_read_as_the_hand_reader_had_them(doc: dict[str, Any]) -> None:
    assert text(LLMResult.from_json(doc).to_json()) == EMPTY


def test_counts_read_as_before() -> None:
    assert Usage.from_json({"input_tokens": 3.0, "output_tokens": "4"}) == Usage(3, 4)


@pytest.mark.parametrize("doc", [
    {"text": "a", "tool_calls": [{"id": "c", "name": "f"}]},  # no arguments
    {"text": "a", "tool_calls": [{"id": "c", "name": "f", "arguments": [1]}]},
    {"text": 3},
])
def test_a_result_of_another_shape_is_a_validation_error(doc: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        LLMResult.from_json(doc)


def test_limiter_stats_are_written_as_before() -> None:
    stats = LimiterStats(1, 2, 0.12345678, 0, 1, 3, 4, 1.0000004, 0, 2)
    assert text(stats.to_json()) == (
        '{"granted":1,"waited":2,"wait_seconds":0.123457,"refused":0,"paused":1,'
        '"slots_granted":3,"slots_waited":4,"slot_wait_seconds":1.0,"slots_refused":0,'
        '"slots_reclaimed":2}')
