"""A run's cancel reaches node code blocked in a model call: ``on_cancel(ctx, stop)``
registers what stops it, and the process's run watch calls it (the HTTP stream is closed,
the provider sees the disconnect)."""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph, Hypha, Next, NodeContext, RunCancelled
from hypha_celery.backends.llm.types import LLMRequest
from hypha_celery.graph import NodeContext as BareContext
from hypha_celery.runtime.cancels import POLL_S, RunWatch, on_cancel
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT, wait_until


def once(node: str) -> Any:
    def policy(ctx: Context) -> Next | Finish:
        return Next(node) if ctx.step == 0 else Finish(ctx.state)
    return policy


def test_a_cancel_calls_what_the_blocked_node_registered(hypha: Hypha) -> None:
    entered, stop, cancelled_at = threading.Event(), threading.Event(), []

    def blocked(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        with on_cancel(ctx, lambda: (cancelled_at.append(time.monotonic()), stop.set())):
            entered.set()
            stop.wait(WAIT)
        return {}

    hypha.register(Graph("w1", {"a": blocked}, once("a")))
    run = hypha.start("w1")
    assert entered.wait(WAIT)
    began = time.monotonic()
    assert run.cancel()
    with pytest.raises(RunCancelled):
        run.wait(WAIT)
    wait_until(lambda: cancelled_at, what="the registered cancel")
    assert cancelled_at[0] - began < 1.0


def test_a_cancel_closes_a_model_stream_in_a_node(hypha: Hypha) -> None:
    from hypha_celery.backends.llm import openai as provider

    entered, ended = threading.Event(), []

    def model_call(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        request = LLMRequest("gpt-test", ({"role": "user", "content": "hi"},))
        stream = provider.open_stream(request, key="sk-test", base_url=url, timeout=30)
        with on_cancel(ctx, stream.close):
            entered.set()
            try:
                for _ in stream:
                    pass
            finally:
                ended.append(stream.closed)
        return {}

    with FakeLLM(default=Reply.hang(30)) as fake:
        url = fake.openai_url
        hypha.register(Graph("w2", {"a": model_call}, once("a")))
        run = hypha.start("w2")
        assert entered.wait(WAIT)
        began = time.monotonic()
        assert run.cancel()
        assert fake.wait_closed(5), "the provider still writes the stream"
        wait_until(lambda: ended, what="the node's stream to end")
        assert ended == [True]
        assert time.monotonic() - began < 2.0


def test_a_context_built_by_hand_watches_nothing() -> None:
    """A hand-built context (no cancel flag of a run) registers nothing: the block runs,
    its errors pass through, ``cancel`` is never called and no watch thread starts."""
    ctx = BareContext("r", "e", "n")
    calls: list[str] = []
    watches = {t for t in threading.enumerate() if t.name == RunWatch.name}
    manager = on_cancel(ctx, lambda: calls.append("cancel"))
    assert isinstance(manager, nullcontext)
    with manager as entered:
        assert entered is None
    with pytest.raises(ValueError, match="inside"), on_cancel(ctx, lambda: calls.append("x")):
        raise ValueError("inside")
    time.sleep(2 * POLL_S)  # a watch would have polled twice by now
    assert calls == [] and ctx.cancelled() is False
    assert {t for t in threading.enumerate() if t.name == RunWatch.name} <= watches
