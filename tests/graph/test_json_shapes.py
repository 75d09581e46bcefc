"""A decision's JSON (``to_json``, by pydantic's adapter) has the keys and values the
hand-written ``to_json`` gave: each literal is the previous version's output."""

from __future__ import annotations

import json

import pytest

from hypha_celery.graph import Decision, Fail, FanOut, Finish, Next, Review

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
