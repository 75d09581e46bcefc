"""``ctx.model`` / ``ctx.tool`` recording and serving (pure: no services)."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery.errors import GraphSpecError, InvalidCall, ReplayDivergence
from hypha_celery.graph import NodeContext
from hypha_celery.graph import calls as calls_mod
from hypha_celery.graph.calls import Calls, RecordedCallError, request_hash


def ctx(calls: Calls) -> NodeContext:
    return NodeContext("r", "r.1", "n", 1, lambda: False, calls)


def test_live_calls_are_recorded_in_order_with_hash_not_request() -> None:
    calls = Calls("r.1", "n")
    c = ctx(calls)
    assert c.model("m", lambda req: {"text": req["p"].upper()}, {"p": "secret"}) == {"text":
                                                                                     "SECRET"}
    assert c.tool("t", lambda args: [1, 2], {"q": 1}, side_effect="write") == [1, 2]
    first, second = calls.records
    assert (first["call_id"], first["family"], first["name"]) == ("r.1:m0", "model", "m")
    assert first["request_hash"] == request_hash({"p": "secret"})
    assert "secret" not in str(first) and first["ended_at"] >= first["started_at"]
    assert (second["call_id"], second["side_effect"]) == ("r.1:t1", "write")


def test_a_failing_call_is_recorded_then_raised() -> None:
    calls = Calls("r.1", "n")

    def boom(req: Any) -> Any:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        ctx(calls).model("m", boom, {})
    assert calls.records[0]["error"]["type"] == "ConnectionError"


def test_bad_calls_are_typed_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    c = ctx(Calls("r.1", "n"))
    with pytest.raises(InvalidCall, match="request must be JSON"):
        c.model("m", lambda r: {}, {"x": object()})
    with pytest.raises(InvalidCall, match="not JSON"):
        c.model("m", lambda r: object(), {})
    with pytest.raises(InvalidCall, match="needs a name"):
        c.model("", lambda r: {}, {})
    with pytest.raises(GraphSpecError, match="side_effect"):
        c.tool("t", lambda r: {}, {}, side_effect="nuclear")  # type: ignore[arg-type]
    monkeypatch.setattr(calls_mod, "MAX_OUTPUT_BYTES", 10)
    with pytest.raises(InvalidCall, match="at most 10"):
        c.model("m", lambda r: "x" * 20, {})
    monkeypatch.setattr(calls_mod, "MAX_CALLS", 1)
    c2 = ctx(Calls("r.1", "n"))
    c2.model("m", lambda r: 1, {})
    with pytest.raises(InvalidCall, match="more than 1 calls"):
        c2.model("m", lambda r: 1, {})


def test_replay_serves_recorded_outputs_and_errors_and_catches_changes() -> None:
    recorded = [{"call_id": "r.1:m0", "family": "model", "name": "m",
                 "request_hash": request_hash({"p": 1}), "output": {"text": "old"}},
                {"call_id": "r.1:t1", "family": "tool", "name": "t",
                 "request_hash": request_hash({}), "error": {"type": "Timeout",
                                                              "message": "slow"}}]

    def never(req: Any) -> Any:
        raise AssertionError("a replay must not call")

    calls = Calls("r.1", "n", recorded)
    c = ctx(calls)
    assert c.model("m", never, {"p": 1}) == {"text": "old"}
    with pytest.raises(RecordedCallError) as err:
        c.tool("t", never, {})
    assert err.value.type == "Timeout" and calls.unused() == 0
    with pytest.raises(ReplayDivergence, match="new model call"):
        c.model("m", never, {})
    with pytest.raises(ReplayDivergence, match="request_hash"):
        ctx(Calls("r.1", "n", recorded)).model("m", never, {"p": 2})
    with pytest.raises(ReplayDivergence, match="name"):
        ctx(Calls("r.1", "n", recorded)).model("other", never, {"p": 1})
