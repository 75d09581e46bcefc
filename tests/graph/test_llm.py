"""``ctx.llm`` in a real embedded run against the fake model server (real SDKs over
loopback HTTP): recorded ``model.call.*`` events with provider, usage, latency and cost,
live tokens on ``run:<id>``, replay with the server stopped, ``Node(models=...)``
validation and routing, retries of rate-limited calls, and the sentinel key nowhere."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery.signals import before_task_publish

from hypha_celery import Finish, Graph, Hypha, Next, Node, NodeContext, RetryPolicy, Settings
from hypha_celery.backends import BackendError
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.backends.llm.pricing import Price
from hypha_celery.backends.llm.ratelimit import MemoryLimiter
from hypha_celery.errors import InvalidModelRef, RunCancelled, RunFailed
from hypha_celery.rerun import rerun
from hypha_celery.runtime.config import EFFECTS_QUEUE, IO_QUEUE, NODES_QUEUE
from hypha_celery.runtime.coordinator import node_call
from hypha_celery.runtime.protocol import NodeMessage
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT, wait_until

SENTINEL = "sk-SENTINEL-graph-llm-0123456789abcdef"
PROMPT = "PROMPT-never-stored-in-events"
MODEL = "openai:gpt-test"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SENTINEL)
    with FakeLLM() as server:
        yield server


def app(sqlite_url: str, fake: FakeLLM, **client: Any) -> Hypha:
    llm = LLMClient(base_urls={"openai": fake.openai_url, "anthropic": fake.url}, **client)
    return Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                          store_url=sqlite_url, embedded=True), llm=llm)


def ask(state: dict[str, Any], question: str, ctx: NodeContext) -> dict[str, Any]:
    answer = ctx.llm(MODEL, [{"role": "system", "content": PROMPT},
                             {"role": "user", "content": question}], max_output_tokens=50)
    return {"answer": answer.text, "tokens": answer.usage.total}


def policy(ctx: Any) -> Any:
    return Next("ask", ctx.input) if ctx.step == 0 else Finish(ctx.state)


def qa(node: Node | None = None) -> Graph:
    return Graph("qa", {"ask": node or Node(ask, models=[MODEL])}, policy)


def test_a_call_is_recorded_with_its_measures_and_replays_with_the_server_stopped(
        sqlite_url: str, fake: FakeLLM) -> None:
    fake.script(Reply.text("Paris is the capital.", chunks=4, usage=(40, 6, 8, 0)))
    h = app(sqlite_url, fake, prices={MODEL: Price(input=2.0, output=8.0, cache_read=0.5)})
    try:
        h.register(qa())
        run = h.start("qa", "capital of France?")
        assert run.wait(WAIT) == {"answer": "Paris is the capital.", "tokens": 46}
        events = run.events()
    finally:
        h.close()
    calls = {e.type: e.payload for e in events if e.type.startswith("model.call.")}
    started, done = calls["model.call.started"], calls["model.call.completed"]
    assert (started["model"], started["provider"]) == (MODEL, "openai")
    assert len(started["request_hash"]) == 16 and started["request_bytes"] > len(PROMPT)
    assert done["usage"] == {"input_tokens": 40, "output_tokens": 6, "cache_read_tokens": 8,
                             "cache_write_tokens": 0}
    assert done["cost_usd"] == pytest.approx((32 * 2 + 8 * 0.5 + 6 * 8) / 1e6)
    assert done["latency_ms"] > 0 and done["wait_ms"] >= 0
    assert done["output"]["text"] == "Paris is the capital."
    dump = json.dumps([e.model_dump() for e in events])
    assert PROMPT not in dump and "capital of France" in dump  # the run input is the input
    assert SENTINEL not in dump
    fake.stop()  # a replay calls nothing
    seen = len(fake.requests)
    report = rerun(qa(), events)
    assert report.ok, report.divergence
    assert report.executions == 1 and len(fake.requests) == seen
    changed = rerun(qa(Node(lambda s, q, ctx: ask(s, q + "!", ctx), models=[MODEL])), events)
    assert changed.divergence is not None and changed.divergence.what == "call"


def test_tokens_stream_live_to_the_run_topic(sqlite_url: str, fake: FakeLLM) -> None:
    gate = threading.Event()

    def gated(state: dict[str, Any], question: str, ctx: NodeContext) -> dict[str, Any]:
        gate.wait(WAIT)
        return ask(state, question, ctx)

    fake.script(Reply.text("one two three four", chunks=4))
    h = app(sqlite_url, fake)
    try:
        h.register(qa(Node(gated, models=[MODEL])))
        run = h.start("qa", "count")
        with run.stream(timeout=WAIT) as stream:
            gate.set()
            items = list(stream)
        run.wait(WAIT)
    finally:
        h.close()
    texts = [i for i in items if i["kind"] == "text"]
    assert "".join(i["text"] for i in texts) == "one two three four"  # deltas may join
    assert texts[0]["text"] == "one t"  # the first delta (of 4 chunks) goes at once
    assert {i["execution_id"] for i in texts} == {f"{run.id}.1"}
    assert texts[0]["call_id"] == f"{run.id}.1:m0"
    assert items[-1]["kind"] == "end" and items[-1]["status"] == "completed"
    assert any(i["kind"] == "usage" for i in items)


def test_a_rate_limited_call_is_retried_after_the_pause(sqlite_url: str,
                                                        fake: FakeLLM) -> None:
    limiter = MemoryLimiter()
    fake.script(Reply.error(429, retry_after="0.5"), Reply.text("fine"))
    h = app(sqlite_url, fake, limiter=limiter)
    try:
        h.register(qa(Node(ask, models=[MODEL], retry=RetryPolicy(max_attempts=2,
                                                                   backoff=0.05))))
        run = h.start("qa", "hi")
        assert run.wait(WAIT)["answer"] == "fine"
        events = run.events()
    finally:
        h.close()
    failed = next(e.payload for e in events if e.type == "model.call.failed")
    assert failed["error"]["class"] == "rate_limit" and failed["error"]["type"] == "BackendError"
    assert "latency_ms" in failed
    done = next(e.payload for e in events if e.type == "model.call.completed")
    assert done["attempt"] == 2 and done["wait_ms"] > 200  # the pause held the retry back
    assert limiter.stats()["paused"] == 1


def test_models_are_checked_at_definition_and_route_the_node_to_the_io_queue(
        sqlite_url: str, fake: FakeLLM) -> None:
    with pytest.raises(InvalidModelRef):
        Node(ask, models=["nope:gpt"])
    with pytest.raises(InvalidModelRef):
        Node(ask, models=["openai"])
    assert Node(ask, models="openai:a").models == ("openai:a",)
    h = app(sqlite_url, fake)
    try:
        graph = Graph("routes", {
            "io": Node(ask, models=[MODEL]), "own": Node(ask, models=[MODEL], queue="gpu"),
            "plain": Node(ask), "effect": Node(ask, models=[MODEL],
                                               side_effect="external_effect")}, policy)
        queues = {n: node_call(h._rt, graph, NodeMessage("r", "r.1", n, None)).queue
                  for n in graph.nodes}
        assert queues == {"io": IO_QUEUE, "own": "gpu", "plain": NODES_QUEUE,
                          "effect": EFFECTS_QUEUE}
        assert IO_QUEUE in h.queues()
    finally:
        h.close()


def test_a_node_calls_only_the_models_it_declares(sqlite_url: str, fake: FakeLLM) -> None:
    h = app(sqlite_url, fake)
    try:
        h.register(qa(Node(ask, models=["anthropic:claude-test"])))
        with pytest.raises(RunFailed):
            h.start("qa", "hi").wait(WAIT)
    finally:
        h.close()
    assert fake.requests == []


def test_the_sentinel_key_is_nowhere(sqlite_url: str, fake: FakeLLM,
                                     caplog: pytest.LogCaptureFixture) -> None:
    """Events, logs, exception text and Celery task messages of runs that call a model,
    one succeeding and one whose provider echoes the key in its error."""
    published: list[str] = []

    def capture(body: Any = None, headers: Any = None, **_: Any) -> None:
        published.append(repr(body) + repr(headers))

    before_task_publish.connect(capture, weak=False)
    caplog.set_level(logging.DEBUG)
    fake.script(Reply.text("ok"), Reply.error(401, message=f"bad key {SENTINEL}"))
    h = app(sqlite_url, fake)
    errors: list[str] = []

    def node(state: dict[str, Any], question: str, ctx: NodeContext) -> dict[str, Any]:
        try:
            return ask(state, question, ctx)
        except BackendError as exc:
            errors.append(f"{exc} {exc!r} {exc.message} {exc.to_json()} {exc.args}")
            raise

    try:
        h.register(qa(Node(node, models=[MODEL])))
        good = h.start("qa", "hi")
        good.wait(WAIT)
        bad = h.start("qa", "again")
        with pytest.raises(RunFailed) as failed:
            bad.wait(WAIT)
        events = good.events() + bad.events()
    finally:
        before_task_publish.disconnect(capture)
        h.close()
    assert errors and "authentication" in errors[0]
    text = json.dumps([e.model_dump() for e in events]) + caplog.text + "".join(published) \
        + "".join(errors) + str(failed.value) + repr(failed.value)
    assert published and SENTINEL not in text
    assert SENTINEL in fake.requests[0].headers.get("authorization", "")  # it was sent


def test_a_run_cancel_closes_a_call_waiting_on_the_provider(sqlite_url: str,
                                                            fake: FakeLLM) -> None:
    fake.script(Reply.hang(30))  # the first delta, then nothing: a read blocks
    hypha = app(sqlite_url, fake)
    try:
        hypha.register(qa())
        run = hypha.start("qa", "hello?")
        wait_until(lambda: fake.open_streams == 1, what="the call's stream")
        began = time.monotonic()
        assert run.cancel()
        with pytest.raises(RunCancelled):
            run.wait(WAIT)
        assert fake.wait_closed(5)  # the provider saw the disconnect
        closed_after = time.monotonic() - began
    finally:
        hypha.close()
    assert closed_after < 3.0
