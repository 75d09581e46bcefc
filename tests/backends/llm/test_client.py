"""LLMClient over the real SDKs and the fake model server: usage, cost, live deltas,
rate limits (a 429 pauses the key), and HostedBackend taking from the same limiter."""

from __future__ import annotations

import json
import threading
import time

import pytest

from hypha_celery.backends import BackendError, OpenAIBackend, collect
from hypha_celery.backends.llm.client import BackendServices, LiveSink, LLMClient
from hypha_celery.backends.llm.pricing import Price
from hypha_celery.backends.llm.ratelimit import Limit, MemoryLimiter, limit_key
from hypha_celery.live import MemoryLiveBus
from tests.backends.llm.support import APIS, KEY, base_url
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import wait_until

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


def client_for(fake: FakeLLM, **kwargs: object) -> LLMClient:
    return LLMClient(base_urls={"openai": fake.openai_url, "anthropic": fake.url},
                     **kwargs)  # type: ignore[arg-type]


def test_a_call_returns_the_answer_usage_latency_and_cost(fake: FakeLLM, api: str,
                                                          keys: None) -> None:
    fake.script(Reply.text("Hello world", chunks=3, usage=(1000, 500, 0, 0)))
    ref = APIS[api]
    client = client_for(fake, prices={ref: Price(input=2.0, output=8.0)})
    done = client.call(ref, USER, max_output_tokens=64)
    assert done.result.text == "Hello world" and done.result.usage.output_tokens == 500
    assert done.cost_usd == pytest.approx((1000 * 2 + 500 * 8) / 1e6)
    assert done.latency_ms > 0 and done.wait_ms >= 0
    measures = done.measures()
    assert measures["provider"] == ref.split(":")[0] and measures["usage"]["input_tokens"] == 1000
    assert KEY not in json.dumps(measures)
    unpriced = client_for(fake).call(ref, USER)
    assert unpriced.cost_usd is None and "cost_usd" not in unpriced.measures()


def test_text_deltas_reach_the_live_topic_as_they_arrive(fake: FakeLLM, keys: None) -> None:
    bus = MemoryLiveBus()
    fake.script(Reply.tool_call("kb_search", {"q": "x"}),
                Reply.text("one two three", chunks=3))
    client = client_for(fake)
    with bus.subscribe("run:r1", timeout=5) as sub:
        client.call("openai:gpt-test", USER, live=LiveSink(bus, "run:r1", {"call_id": "c0"}))
        client.call("openai:gpt-test", USER, live=LiveSink(bus, "run:r1", {"call_id": "c1"}))
        bus.publish("run:r1", {"kind": "end"})
        items = list(sub)
    texts = [i["text"] for i in items if i["kind"] == "text"]
    assert "".join(texts) == "one two three" and texts[0] == "one t"  # the first at once
    tool = next(i for i in items if i["kind"] == "tool_use")
    assert tool == {"kind": "tool_use", "id": "call_1", "name": "kb_search", "call_id": "c0"}
    assert [i["kind"] for i in items if i["kind"] == "usage"] == ["usage", "usage"]


def test_a_429_pauses_the_key_for_every_caller_of_the_limiter(fake: FakeLLM,
                                                             keys: None) -> None:
    limiter = MemoryLimiter()
    client = client_for(fake, limiter=limiter, max_wait=0.2)
    fake.script(Reply.error(429, retry_after="1"))
    with pytest.raises(BackendError) as caught:
        client.call("openai:gpt-test", USER)
    assert (caught.value.kind, caught.value.status, caught.value.retry_after) == (
        "rate_limited", 429, 1.0)
    seen = len(fake.requests)
    with pytest.raises(BackendError) as paused:  # refused by the limiter: nothing sent
        client.call("openai:gpt-test", USER)
    assert paused.value.kind == "rate_limited" and paused.value.status is None
    assert len(fake.requests) == seen and limiter.stats()["paused"] == 1
    # another key of the same vendor is not paused
    assert limiter.decide(limit_key("openai", "sk-other-key-000000"), 0) == 0
    assert KEY not in repr(paused.value) + str(paused.value) + paused.value.message


def test_the_hosted_backend_takes_from_the_bound_limiter(fake: FakeLLM, keys: None) -> None:
    limiter = MemoryLimiter({"openai": Limit(rpm=1)})
    backend = OpenAIBackend()
    backend.bind(BackendServices(limiter, max_wait=0.1))
    session = backend.start_session({"model": "gpt-test", "base_url": fake.openai_url})
    events, _ = backend.prompt(session, "hi")
    assert collect("hi", events).text == "ok"
    began = time.monotonic()
    events, _ = backend.prompt(session, "again")
    turn = collect("again", events)
    assert getattr(turn, "reason", None) == "rate_limited" and time.monotonic() - began < 1
    assert len(fake.requests) == 1 and limiter.stats()["refused"] == 1


def test_the_hosted_backend_pauses_its_key_on_a_429(fake: FakeLLM, keys: None) -> None:
    limiter = MemoryLimiter()
    backend = OpenAIBackend()
    backend.bind(BackendServices(limiter, max_wait=0.0))
    session = backend.start_session({"model": "gpt-test", "base_url": fake.openai_url})
    fake.script(Reply.error(429, retry_after="30"))
    events, _ = backend.prompt(session, "hi")
    assert getattr(collect("hi", events), "reason", None) == "rate_limited"
    assert limiter.decide(limit_key("openai", KEY), 0) > 25


def test_a_call_holds_its_concurrency_slot_until_its_stream_is_closed(
        fake: FakeLLM, keys: None) -> None:
    """Concurrency 1: a second call waits for the first's stream to end (not just for its
    headers), and an agent turn holds the same slot until its stream is closed."""
    limiter = MemoryLimiter({"openai": Limit(concurrency=1)})
    client = client_for(fake, limiter=limiter, max_wait=10)
    key = limit_key("openai", KEY)
    fake.script(Reply.hang(1), Reply.text("second"))  # a delta, 1 s of nothing, a cut
    failed: list[str] = []

    def slow() -> None:
        try:
            client.call("openai:gpt-test", USER)
        except BackendError as exc:
            failed.append(exc.kind)

    first = threading.Thread(target=slow)
    first.start()
    wait_until(lambda: fake.open_streams == 1, what="the first call's stream")
    assert limiter.in_flight(key) == 1
    second = client.call("openai:gpt-test", USER)
    first.join(10)
    assert failed == ["incomplete_stream"]  # a failed call gives its slot back too
    assert second.result.text == "second" and second.wait_ms > 200  # waited for the slot
    assert limiter.in_flight(key) == 0 and limiter.stats()["slots_waited"] == 1
    backend = OpenAIBackend()
    backend.bind(BackendServices(limiter, max_wait=0.1))
    session = backend.start_session({"model": "gpt-test", "base_url": fake.openai_url})
    events, _ = backend.prompt(session, "hi")
    assert next(events).kind == "text" and limiter.in_flight(key) == 1  # mid-stream
    with pytest.raises(BackendError) as busy:
        client.call("openai:gpt-test", USER)
    assert busy.value.kind == "rate_limited" and "concurrency" in busy.value.message
    assert collect("hi", events).text == "ok" and limiter.in_flight(key) == 0


def test_unknown_options_and_references_fail_before_anything_is_sent(fake: FakeLLM,
                                                                     keys: None) -> None:
    client = client_for(fake)
    with pytest.raises(BackendError) as caught:
        client.call("openai:gpt-test", USER, thinking_budget=10)
    assert caught.value.kind == "invalid_request"
    from hypha_celery.errors import InvalidModelRef
    with pytest.raises(InvalidModelRef):
        client.call("nope:gpt-test", USER)
    assert fake.requests == []


def test_base_urls_by_provider_win_over_the_vendor(fake: FakeLLM) -> None:
    client = LLMClient(base_urls={"openai": "http://a/v1", "openai-chat": "http://b/v1"})
    from hypha_celery.backends.llm.ref import ModelRef
    assert client.base_url(ModelRef.parse("openai:x")) == "http://a/v1"
    assert client.base_url(ModelRef.parse("openai-chat:x")) == "http://b/v1"
    assert client.base_url(ModelRef.parse("anthropic:x")) is None
    assert base_url(fake, "messages") == fake.url
    vendor_only = LLMClient(base_urls={"openai": "http://a/v1"})
    assert vendor_only.base_url(ModelRef.parse("openai-chat:x")) == "http://a/v1"
    chat_only = LLMClient(base_urls={"openai-chat": "http://b/v1"})
    assert chat_only.base_url(ModelRef.parse("openai:x")) is None  # never the other way


def test_hypha_model_base_urls_reach_the_client_and_refuse_unknown_providers(
        fake: FakeLLM, keys: None) -> None:
    """``HYPHA_MODEL_BASE_URLS`` with only ``openai``: an ``openai-chat`` call goes there;
    a key no provider has (a typo) is a SetupError, not calls sent to the SDK default."""
    from hypha_celery.errors import InvalidModelRef, SetupError
    from hypha_celery.runtime.config import Settings

    settings = Settings.from_env({"HYPHA_MODEL_BASE_URLS": json.dumps(
        {"openai": fake.openai_url})})
    done = LLMClient(base_urls=settings.model_base_urls).call("openai-chat:gpt-test", USER)
    assert done.result.text == "ok" and fake.requests[-1].path == "/v1/chat/completions"
    for bad in ({"opneai": "http://a/v1"}, {"openai": 5}, {"openai": ""}):
        with pytest.raises(SetupError, match="HYPHA_MODEL_"):
            Settings.from_env({"HYPHA_MODEL_BASE_URLS": json.dumps(bad)})
    with pytest.raises(InvalidModelRef, match="opneai"):
        LLMClient(base_urls={"opneai": "http://a/v1"})


def test_dense_deltas_join_into_one_item_and_a_pause_sends_at_once() -> None:
    import time

    from hypha_celery.backends.llm.client import COALESCE_S, _Relay

    bus = MemoryLiveBus()
    with bus.subscribe("run:r2", timeout=5) as sub:
        relay = _Relay(LiveSink(bus, "run:r2", {"call_id": "c0"}))
        relay.event("text", {"text": "a"})  # the first: at once
        relay.event("text", {"text": "b"})  # within the window: held
        relay.event("text", {"text": "c"})
        time.sleep(COALESCE_S * 2)
        relay.event("text", {"text": "d"})  # after a pause: with what was held
        relay.event("text", {"text": "e"})
        relay.event("usage", {"input_tokens": 1})  # flushes the text first
        relay.flush()
        bus.publish("run:r2", {"kind": "end"})
        items = list(sub)
    assert [(i["kind"], i.get("text")) for i in items] == [
        ("text", "a"), ("text", "bcd"), ("text", "e"), ("usage", None), ("end", None)]
