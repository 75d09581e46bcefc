"""``model.call.failed`` carries the error kind as a field (``error_kind``), and the
console's run page and the metrics' model-call failure counter use it: a real embedded
run against the local model server whose calls fail as a cut stream, then a 429, then
succeed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from hypha_celery import Finish, Graph, Hypha, Next, Node, NodeContext, RetryPolicy, Settings
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.backends.llm.errors import ModelErrorKind
from hypha_celery.events.payloads import ModelCallFailed
from hypha_celery.metrics import PrometheusMiddleware
from hypha_celery.middleware import Call, CallEnd
from tests.console.support import app_for, client, tokens
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT

MODEL = "openai:gpt-test"
FAILURES = "hypha_model_call_failures_total"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-error-kind")
    with FakeLLM() as server:
        yield server


def ask(state: dict[str, Any], question: str, ctx: NodeContext) -> dict[str, Any]:
    return {"answer": ctx.llm(MODEL, [{"role": "user", "content": question}]).text}


def policy(ctx: Any) -> Any:
    return Next("ask", ctx.input) if ctx.step == 0 else Finish(ctx.state)


def test_failed_calls_carry_their_kind_to_events_console_and_metrics(
        sqlite_url: str, fake: FakeLLM) -> None:
    fake.script(Reply.cut(after=1), Reply.error(429), Reply.text("fine"))
    registry = CollectorRegistry()
    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=sqlite_url, embedded=True),
              llm=LLMClient(base_urls={"openai": fake.openai_url}),
              middleware=[PrometheusMiddleware(registry)])
    t = tokens()
    try:
        retry = RetryPolicy(max_attempts=3, backoff=0.05)
        h.register(Graph("kinds", {"ask": Node(ask, models=[MODEL], retry=retry)}, policy))
        run = h.start("kinds", "hi")
        assert run.wait(WAIT) == {"answer": "fine"}
        events = run.events()
        page = client(app_for(h, t), t.admin).get(f"/runs/{run.id}").text
    finally:
        h.close()
    failed = [e.body_as(ModelCallFailed) for e in events if e.type == "model.call.failed"]
    assert [f.error_kind for f in failed] == ["incomplete_stream", "rate_limited"]
    assert [f.error and f.error["class"] for f in failed] == ["transient", "rate_limit"]
    done = next(e.payload for e in events if e.type == "model.call.completed")
    assert "error_kind" not in done
    assert '<span class="error-kind">incomplete_stream</span>' in page
    assert '<span class="error-kind">rate_limited</span>' in page
    for kind in ("incomplete_stream", "rate_limited"):
        assert registry.get_sample_value(FAILURES, {"model": MODEL, "error_kind": kind}) == 1


def test_a_call_that_is_not_a_backend_error_has_no_kind(sqlite_url: str) -> None:
    def boom(state: dict[str, Any], question: str, ctx: NodeContext) -> dict[str, Any]:
        def call(_: Any) -> Any:
            raise KeyError("not a provider failure")
        return {"answer": ctx.model("custom:model", call, {"q": question})}

    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=sqlite_url, embedded=True))
    try:
        h.register(Graph("nokind", {"ask": Node(boom)}, policy))
        run = h.start("nokind", "hi")
        with pytest.raises(Exception):  # noqa: B017 - the run fails; its events are the point
            run.wait(WAIT)
        events = run.events()
    finally:
        h.close()
    failed = next(e.payload for e in events if e.type == "model.call.failed")
    assert "error_kind" in failed and failed["error_kind"] is None
    assert failed["error"]["type"] == "KeyError"


def test_the_failure_counter_label_is_bounded() -> None:
    registry = CollectorRegistry()
    mw = PrometheusMiddleware(registry)
    model = Call("r1", "r1.1", "ask", "model", MODEL, "r1.1:m0")
    tool = Call("r1", "r1.1", "ask", "tool", "search", "r1.1:t1")
    mw.after_call(model, CallEnd(0.1, "BackendError", error_kind="server_error"))
    mw.after_call(model, CallEnd(0.1, "BackendError", error_kind="made_up_kind"))
    mw.after_call(model, CallEnd(0.1, "SoftTimeLimitExceeded"))
    mw.after_call(model, CallEnd(0.1, None))  # a success counts nowhere here
    mw.after_call(tool, CallEnd(0.1, "BackendError", error_kind="server_error"))

    def failures(kind: str) -> float | None:
        return registry.get_sample_value(FAILURES, {"model": MODEL, "error_kind": kind})

    assert (failures("server_error"), failures("other"), failures("none")) == (1, 1, 1)
    assert registry.get_sample_value(FAILURES, {"model": "search",
                                                "error_kind": "server_error"}) is None
    assert "server_error" in set(ModelErrorKind)
