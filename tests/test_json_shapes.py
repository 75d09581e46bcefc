"""Principals, pending reviews and workflow transitions are written (and principals read)
by pydantic adapters as the JSON the hand-written ``to_json`` / ``from_json`` gave, key
order included: each literal is the previous version's output."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hypha_celery.errors import InvalidPrincipal
from hypha_celery.fsm.machine import Transition
from hypha_celery.guards import parse
from hypha_celery.principals import Principal
from hypha_celery.reviews import PendingReview


def text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_a_principal_is_written_and_read_as_before() -> None:
    alice = Principal.user("alice")
    assert text(alice.to_json()) == '{"role":"user","id":"alice"}'
    assert Principal.from_json({"role": "admin", "id": "ops"}) == Principal.admin("ops")


@pytest.mark.parametrize(("bad", "problem"), [
    ({"role": "root", "id": "x"}, "unknown principal role 'root'"),
    ({"role": "user", "id": "a/b"}, "a principal id has at most 128 of the characters"),
    ({"role": "user", "id": "x", "extra": 1}, "a principal is {'role'"),
    ({"id": "x"}, "a principal is {'role'"),
    ("user:x", "a principal is {'role'"),
])
def test_a_bad_principal_says_what_is_wrong(bad: Any, problem: str) -> None:
    with pytest.raises(InvalidPrincipal, match=problem.replace("{", r"\{")):
        Principal.from_json(bad)


def test_a_pending_review_is_written_as_before() -> None:
    review = PendingReview("r", "r.r1", "g", "check", {"a": [1]}, 3, None, "u", None)
    assert text(review.to_json()) == (
        '{"run_id":"r","review_id":"r.r1","graph_id":"g","reason":"check","subject":{"a":[1]},'
        '"requested_step":3,"expires_at":null,"user_id":"u","session_id":null}')


def test_a_transition_is_written_as_before() -> None:
    guarded = Transition("A", "B", parse("variables.score > 3"), declared=False)
    assert text(guarded.to_json()) == '{"from":"A","to":"B","guard":"variables.score > 3"}'
    assert text(Transition("A", "Failed").to_json()) == '{"from":"A","to":"Failed","guard":null}'
