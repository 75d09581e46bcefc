"""Decisions, errors and outcomes are written and read by pydantic adapters as the JSON
the hand-written ``to_json`` / ``from_json`` gave: each literal is the previous version's
output."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from hypha_celery.graph import (
    Decision,
    ErrorInfo,
    Fail,
    FanOut,
    Finish,
    Next,
    Outcome,
    RetryPolicy,
    Review,
)

PREVIOUS: list[tuple[Decision, str]] = [
    (Next("a", {"x": 1}), '{"type":"next","node_id":"a","input":{"x":1}}'),
    (FanOut([Next("a"), Next("b", [2])], "r"),
     '{"type":"fanout","reducer":"r","edges":[{"type":"next","node_id":"a","input":null},'
     '{"type":"next","node_id":"b","input":[2]}]}'),
    (Finish({"r": 1}), '{"type":"finish","result":{"r":1}}'),
    (Fail("m", "c"), '{"type":"fail","reason":"c","message":"m"}'),
    (Review("why", {"s": 1}, 3.0), '{"type":"review","reason":"why","expires_in":3.0}'),
    (Review("why"), '{"type":"review","reason":"why","expires_in":null}'),
]


@pytest.mark.parametrize(("decision", "previous"), PREVIOUS)
def test_a_decisions_json_is_the_previous_versions(decision: Decision, previous: str) -> None:
    assert decision.to_json() == json.loads(previous)
    assert next(iter(decision.to_json())) == "type"


def test_type_names_the_decision_and_is_not_an_argument() -> None:
    assert [d.type for d, _ in PREVIOUS] == ["next", "fanout", "finish", "fail", "review",
                                            "review"]
    with pytest.raises(TypeError):
        Next("a", None, "finish")  # type: ignore[call-arg]
    assert repr(Next("a", 1)) == "Next(node_id='a', input=1)"


ERRORS = [
    (ErrorInfo("ValueError", "no", "validation"),
     '{"type":"ValueError","message":"no","class":"validation"}'),
    (ErrorInfo("E", "m", "transient", "retries_exhausted"),
     '{"type":"E","message":"m","class":"transient","dead_letter":"retries_exhausted"}'),
    (ErrorInfo("E", "m", "unknown", ""), '{"type":"E","message":"m","class":"unknown"}'),
]


@pytest.mark.parametrize(("error", "previous"), ERRORS)
def test_an_error_is_written_as_before(error: ErrorInfo, previous: str) -> None:
    assert json.dumps(error.to_json(), separators=(",", ":")) == previous


def test_errors_and_outcomes_are_read_as_before() -> None:
    assert ErrorInfo.from_json({"type": "E", "message": "m", "class": "timeout",
                                "by": "supervisor"}) == ErrorInfo("E", "m", "timeout")
    assert ErrorInfo.from_json({"type": 3, "dead_letter": 5}) == ErrorInfo("3", "")
    error = {"type": "E", "message": "m", "class": "transient"}
    last = {"node_id": "a", "execution_id": "r.1", "ok": False, "value": None,
            "error": error}
    assert Outcome.from_json(last) == Outcome("a", False, None, ErrorInfo("E", "m", "transient"),
                                              "r.1")
    assert Outcome.from_json({**last, "ok": True, "value": {"y": 2}, "error": {}}) == (
        Outcome("a", True, {"y": 2}, None, "r.1"))
    with pytest.raises(ValidationError):
        ErrorInfo.from_json({"message": "no type"})


def test_a_retry_policy_is_written_as_before() -> None:
    assert json.dumps(RetryPolicy().to_json(), separators=(",", ":")) == (
        '{"max_attempts":3,"backoff":0.25,"max_backoff":30.0,"jitter":0.2,'
        '"retry_on":["transient","rate_limit","timeout"]}')
