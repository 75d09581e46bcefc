"""The agent-backend contract of OpenAIBackend (Responses, Chat Completions) and
AnthropicBackend, over real HTTP to the fake model server."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery.backends import (
    BackendError,
    BackendEvent,
    HostedBackend,
    Response,
    TurnError,
    collect,
)
from hypha_celery.backends.llm import provider
from hypha_celery.backends.llm.types import LLMRequest, Message
from tests.backends.hosted_support import (
    KEY,
    SEARCH_SPEC,
    VARIANTS,
    options,
    sent_messages,
    started,
    turn,
)
from tests.fakes.llm_server import FakeLLM, Reply


@pytest.fixture(params=list(VARIANTS))
def api(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    return str(request.param)


def test_a_conversation_keeps_its_history_in_the_session(fake: FakeLLM, api: str) -> None:
    backend, session = started(fake, api, system="be brief")
    fake.script(Reply.text("Hello there", chunks=2, usage=(10, 2, 3, 0)), Reply.text("Bye"))
    first, session = turn(backend, session, "hi")
    assert isinstance(first, Response) and first.text == "Hello there"
    assert first.model == VARIANTS[api][1]["model"]
    assert "be brief" in json.dumps(fake.requests[-1].body)
    assert first.usage is not None and first.usage["cache_read_tokens"] == 3
    assert [e.kind for e in first.events] == ["text", "text", "usage", "result"]
    assert set(first.terminal.data) == {"text", "usage", "model", "stop_reason", "tool_calls"}
    second, session = turn(backend, session, "bye")
    assert isinstance(second, Response) and second.text == "Bye"
    assert list(sent_messages(fake)) == ["hi", "Hello there", "bye"]
    assert session["messages"] == [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello there"},
        {"role": "user", "content": "bye"}, {"role": "assistant", "content": "Bye"}]
    assert set(session) == {"opts", "messages"} and KEY not in json.dumps(session)
    assert json.loads(json.dumps(session)) == session


def test_tool_calls_are_answered_by_the_next_prompt(fake: FakeLLM, api: str) -> None:
    backend, session = started(fake, api, tools=[SEARCH_SPEC])
    fake.script(Reply.tool_call("kb_search", {"q": "x"}, call_id="call_1"), Reply.text("done"),
                Reply.tool_call("kb_search", {"q": "y"}, call_id="call_2"), Reply.text("ok"))
    asked, session = turn(backend, session, "find x")
    assert isinstance(asked, Response)
    assert asked.terminal.data["tool_calls"] == [
        {"id": "call_1", "name": "kb.search", "arguments": {"q": "x"}}]
    assert [e.data for e in asked.events if e.kind == "tool_use"] == [
        {"id": "call_1", "name": "kb.search", "input": {"q": "x"}}]
    answered, session = turn(backend, session, HostedBackend.tool_results({"call_1": "found"}))
    assert isinstance(answered, Response) and answered.text == "done"
    assert "found" in list(sent_messages(fake))
    _, session = turn(backend, session, "find y")
    _, session = turn(backend, session, "never mind")  # answers call_2 with "(no result)"
    assert list(sent_messages(fake))[-2:] == ["(no result)", "never mind"]
    roles = [m["role"] for m in session["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool",
                     "user", "assistant"]


@pytest.mark.parametrize(("reply", "reason"), [
    (Reply.error(500), "server_error"), (Reply.error(401), "authentication"),
    (Reply.error(429, retry_after="2"), "rate_limited"),
    (Reply.cut(after=2), "incomplete_stream"), (Reply.malformed(), "malformed_stream")])
def test_failures_after_dispatch_end_the_turn_with_an_error_event(
        fake: FakeLLM, api: str, reply: Reply, reason: str) -> None:
    backend, session = started(fake, api)
    fake.script(reply)
    outcome, failed_session = turn(backend, session, "first try")
    assert isinstance(outcome, TurnError) and outcome.reason == reason
    assert outcome.terminal is not None and outcome.terminal.kind == "error"
    error = outcome.terminal.data["backend_error"]
    assert error == BackendError.from_json(error).to_json() and error["kind"] == reason
    if reason == "rate_limited":
        assert error["retry_after"] == 2.0 and error["retryable"] is True
    # the failed prompt leaves no trace: the next one replaces it
    retried, session = turn(backend, failed_session, "second try")
    assert isinstance(retried, Response) and list(sent_messages(fake)) == ["second try"]
    assert len(session["messages"]) == 2


def test_a_cut_stream_is_never_a_short_answer(fake: FakeLLM, api: str) -> None:
    backend, session = started(fake, api)
    fake.script(Reply.cut(after=2))
    events, _ = backend.prompt(session, "hi")
    seen = list(events)
    assert [e.kind for e in seen][-1] == "error"
    assert not any(e.kind == "result" for e in seen)


def test_connection_refused_is_an_error_event(fake: FakeLLM, api: str) -> None:
    backend = VARIANTS[api][0]()
    session = backend.start_session(options(fake, api, base_url="http://127.0.0.1:9"))
    outcome, _ = turn(backend, session, "hi")
    assert isinstance(outcome, TurnError) and outcome.reason == "transport"


def test_cancel_closes_the_live_stream_from_another_thread(fake: FakeLLM, api: str) -> None:
    backend, session = started(fake, api)
    backend.cancel()  # nothing running: a no-op
    fake.script(Reply.hang(30))
    outcomes: list[Response | TurnError] = []
    seen: list[BackendEvent] = []
    events, _ = backend.prompt(session, "hi")
    reader = threading.Thread(target=lambda: outcomes.append(
        collect("hi", events, on_event=seen.append)))
    reader.start()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen and fake.open_streams == 1
    backend.cancel()
    backend.cancel()
    reader.join(5)
    assert not reader.is_alive()
    assert isinstance(outcomes[0], TurnError) and outcomes[0].reason == "cancelled"
    assert fake.wait_closed(5)
    backend.cancel()  # after the turn: still fine
    again, _ = turn(backend, session, "next")  # the next turn is not cancelled
    assert isinstance(again, Response)


def test_cancel_before_the_stream_opens_sends_nothing(fake: FakeLLM, api: str) -> None:
    backend, session = started(fake, api)
    events, _ = backend.prompt(session, "hi")
    backend.cancel()
    outcome = collect("hi", events)
    assert isinstance(outcome, TurnError) and outcome.reason == "cancelled"
    assert fake.requests == []


def test_the_history_bound_is_a_typed_error_or_a_compaction(fake: FakeLLM, api: str) -> None:
    backend, session = started(fake, api, max_messages=3)
    _, session = turn(backend, session, "one")
    _, session = turn(backend, session, "two")  # 3 messages sent: at the bound
    with pytest.raises(BackendError) as caught:
        backend.prompt(session, "three")
    assert (caught.value.kind, caught.value.retryable) == ("history_overflow", False)
    sent_before = len(fake.requests)

    def keep_last(messages: list[Message]) -> list[Message]:
        return messages[-1:]

    class Compacting(VARIANTS[api][0]):  # type: ignore[misc,valid-type]
        compact = staticmethod(keep_last)

    outcome, compacted = turn(Compacting(), session, "three")
    assert isinstance(outcome, Response) and len(fake.requests) == sent_before + 1
    assert list(sent_messages(fake)) == ["three"] and len(compacted["messages"]) == 2
    small, session = started(fake, api, max_bytes=64)
    with pytest.raises(BackendError) as caught:
        small.prompt(session, "x" * 100)
    assert caught.value.kind == "history_overflow"


def test_reset_session_forgets_the_conversation(fake: FakeLLM, api: str) -> None:
    backend, session = started(fake, api)
    _, session = turn(backend, session, "hi")
    session = backend.reset_session(session)
    assert session["messages"] == [] and session["opts"]["model"]
    backend.terminate_session(session)


def _bad_starts(api: str) -> Iterator[tuple[dict[str, Any], str]]:
    other = "anthropic:claude" if api != "messages" else "openai:gpt"
    yield {"bogus": 1}, "invalid_option"
    yield {"model": ""}, "invalid_model"
    yield {"model": None}, "invalid_model"
    yield {"model": other}, "invalid_model"
    yield {"max_messages": 0}, "invalid_option"
    yield {"timeout": "soon"}, "invalid_option"
    yield {"base_url": "ftp://x"}, "invalid_option"
    yield {"base_url": "https://user:secret@proxy.example/v1"}, "invalid_option"
    yield {"key_env": ""}, "invalid_option"
    yield {"tools": [{"id": "t", "input_schema": {"type": "string"}}]}, "invalid_tool"
    yield {"tools": [{"nothing": 1}]}, "invalid_tool"
    yield {"tools": "kb.search"}, "invalid_tool"
    if api == "messages":
        yield {"api": "chat"}, "invalid_option"
    else:
        yield {"thinking_budget": 100}, "invalid_option"
        yield {"api": "completions"}, "invalid_option"


def test_bad_start_options_are_typed_errors(fake: FakeLLM, api: str) -> None:
    backend = VARIANTS[api][0]()
    for change, kind in _bad_starts(api):
        with pytest.raises(BackendError) as caught:
            backend.start_session({**options(fake, api), **change})
        assert (caught.value.kind, caught.value.retryable) == (kind, False), change
    assert fake.requests == []


def test_a_missing_key_fails_the_start_and_the_turn(fake: FakeLLM, api: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    backend, session = started(fake, api)
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    for attempt in (lambda: backend.start_session(options(fake, api)),
                    lambda: backend.prompt(session, "hi"),
                    lambda: backend.start_session(options(fake, api, key_env="NOT_SET_KEY"))):
        with pytest.raises(BackendError) as caught:
            attempt()
        assert (caught.value.kind, caught.value.retryable) == ("missing_key", False)
    monkeypatch.setenv("NAMED_KEY", KEY)
    backend, session = started(fake, api, key_env="NAMED_KEY")
    assert isinstance(turn(backend, session, "hi")[0], Response)
    assert fake.requests and session["opts"]["key_env"] == "NAMED_KEY"


@pytest.mark.parametrize("secret", ["sk-SENTINEL-0123456789abcdef", "PLAIN-SENTINEL-KEY-42"])
def test_the_key_shows_nowhere_even_when_the_server_echoes_it(
        fake: FakeLLM, api: str, secret: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    backend, session = started(fake, api)
    fake.script(Reply.text("fine"), Reply.error(401, message=f"invalid x-api-key {secret}"),
                Reply.error(400, message=secret), Reply.error(429, message=f"slow {secret}"))
    outcomes = []
    for prompt in ("one", "two", "three"):
        outcome, session = turn(backend, session, prompt)
        outcomes.append(outcome)
    assert [getattr(o, "reason", "ok") for o in outcomes] == [
        "ok", "authentication", "invalid_request"]
    vendor = provider(VARIANTS[api][0].provider)
    with pytest.raises(BackendError) as caught:
        vendor.open_stream(LLMRequest("m", ({"role": "user", "content": "x"},),
                                      options={"api": "chat"} if api == "chat" else {}),
                           key=secret, base_url=options(fake, api)["base_url"], timeout=5)
    err = caught.value
    assert err.kind == "rate_limited" and "slow [redacted]" in err.message
    assert err.__context__ is None and err.__cause__ is None  # no SDK exception attached
    seen = fake.requests[-1].headers
    assert secret in seen.get("authorization", "") + seen.get("x-api-key", "")
    dumps = [json.dumps(session), str(err), repr(err), err.message, str(err.args),
             json.dumps(err.to_json()), caplog.text,
             json.dumps([o.to_json() for o in outcomes])]
    for dump in dumps:
        assert secret not in dump
