"""The policy's Context is a deep copy of the run projection."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph


def view() -> dict[str, Any]:
    return {"run_id": "r1", "step": 2, "state": {"items": [1, {"k": "v"}]},
            "input": {"question": ["q"]}, "user_id": "u", "session_id": "s",
            "last": {"node_id": "a", "execution_id": "r1.2", "ok": False, "value": None,
                     "error": {"type": "ValueError", "message": "bad"}}}


def graph() -> Graph:
    return Graph(id="g", nodes={"a": lambda s, i: {}}, decision_policy=lambda c: Finish())


def test_context_carries_the_projection() -> None:
    ctx = graph().context(view())
    assert (ctx.run_id, ctx.graph_id, ctx.step) == ("r1", "g", 2)
    assert ctx.state == {"items": [1, {"k": "v"}]} and ctx.input == {"question": ["q"]}
    assert (ctx.user_id, ctx.session_id) == ("u", "s")
    assert ctx.last is not None and not ctx.last.ok and ctx.last.node_id == "a"
    assert ctx.last.error is not None and ctx.last.error.type == "ValueError"


def test_mutating_the_context_changes_nothing() -> None:
    v = view()
    ctx = graph().context(v)
    ctx.state["items"].append(2)
    ctx.state["items"][1]["k"] = "changed"
    ctx.state["new"] = True
    ctx.input["question"].clear()
    assert v == view()
    assert graph().context(v).state == {"items": [1, {"k": "v"}]}


def test_context_fields_are_frozen() -> None:
    ctx = graph().context(view())
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.step = 3  # type: ignore[misc]
    assert isinstance(ctx, Context)
