"""``before_call`` / ``after_call``: told around each live model or tool call a node makes
through its context, never for a served (replayed) call, and not built at all when no
middleware overrides them."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery.graph.calls import Calls
from hypha_celery.middleware import Call, CallEnd, Middleware, MiddlewareStack, Step

SECRET = "prompt text"


class Recorder(Middleware):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Call, CallEnd | None]] = []

    def before_call(self, call: Call) -> None:
        self.seen.append(("before", call, None))

    def after_call(self, call: Call, end: CallEnd) -> None:
        self.seen.append(("after", call, end))


def test_a_model_call_and_a_failed_tool_call_are_told_with_ids_usage_and_error_type() -> None:
    rec = Recorder()
    calls = Calls("r.1", "ask", run_id="r", middleware=MiddlewareStack([rec]))
    usage = {"input_tokens": 12, "output_tokens": 3, "cache_read_tokens": 0,
             "cache_write_tokens": 0}
    assert calls.call("model", "openai:gpt-test", lambda req: {"text": "ok"},
                      {"prompt": SECRET}, None, lambda: {"usage": usage}) == {"text": "ok"}

    def broken(args: Any) -> Any:
        raise ConnectionError(SECRET)

    with pytest.raises(ConnectionError):
        calls.call("tool", "search", broken, {"q": SECRET})
    model = Call("r", "r.1", "ask", "model", "openai:gpt-test", "r.1:m0")
    tool = Call("r", "r.1", "ask", "tool", "search", "r.1:t1")
    assert [(what, call) for what, call, _ in rec.seen] == [
        ("before", model), ("after", model), ("before", tool), ("after", tool)]
    ended = rec.seen[1][2]
    assert ended is not None and ended.error_type is None and ended.duration_s >= 0
    assert (ended.input_tokens, ended.output_tokens, ended.cache_read_tokens) == (12, 3, 0)
    failed = rec.seen[3][2]
    assert failed == CallEnd(failed.duration_s, "ConnectionError")  # no tokens, no message
    assert SECRET not in repr(rec.seen)


def test_a_served_call_and_a_stack_without_the_hooks_tell_nothing() -> None:
    rec = Recorder()
    live = Calls("r.1", "ask", run_id="r")
    live.call("tool", "search", lambda args: [1], {"q": 1})
    replay = Calls("r.1", "ask", live.records, run_id="r", middleware=MiddlewareStack([rec]))
    assert replay.call("tool", "search", lambda args: [2], {"q": 1}) == [1]
    assert rec.seen == []

    class StepsOnly(Middleware):
        def before_step(self, step: Step) -> None: ...

    assert Calls("r.1", "ask", middleware=MiddlewareStack([StepsOnly()])).middleware is None
    assert Calls("r.1", "ask", middleware=MiddlewareStack([rec])).middleware is not None
