"""The fake model server speaks each wire protocol well enough for the official SDKs'
own stream helpers (which check event order and identity)."""

from __future__ import annotations

import threading
import time

import anthropic
import openai
import pytest

from tests.fakes.llm_server import STAMP, FakeLLM, Reply

USER = [{"role": "user", "content": "x"}]


@pytest.fixture
def fake() -> FakeLLM:
    with FakeLLM() as server:
        yield server


def test_responses_text_tools_and_reasoning(fake: FakeLLM) -> None:
    client = openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0)
    fake.script(Reply.text("Hello world", chunks=3, usage=(11, 3, 4, 1)),
                Reply.tool_call("kb_search", {"q": "x"}), Reply.thinking("deep", text="fine"))
    with client.responses.stream(model="m", input="hi") as stream:
        final = stream.get_final_response()
    assert final.output_text == "Hello world"
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens == 4
    with client.responses.stream(model="m", input="hi") as stream:
        call = stream.get_final_response().output[0]
    assert (call.type, call.name, call.arguments) == ("function_call", "kb_search", '{"q": "x"}')
    with client.responses.stream(model="m", input="hi") as stream:
        assert stream.get_final_response().output_text == "fine"


def test_chat_completions_text_tools_usage(fake: FakeLLM) -> None:
    client = openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0)
    fake.script(Reply.text("chat hi", chunks=2), Reply.tool_call("kb_search", {"q": "x"}))
    with client.chat.completions.stream(model="m", messages=USER,  # type: ignore[arg-type]
                                        stream_options={"include_usage": True}) as stream:
        done = stream.get_final_completion()
    assert done.choices[0].message.content == "chat hi"
    assert done.usage is not None and done.usage.prompt_tokens == 10
    with client.chat.completions.stream(model="m", messages=USER) as stream:  # type: ignore[arg-type]
        calls = stream.get_final_completion().choices[0].message.tool_calls
    assert calls is not None and calls[0].function.arguments == '{"q": "x"}'  # type: ignore[union-attr]


def test_messages_text_thinking_tools(fake: FakeLLM) -> None:
    client = anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0)
    fake.script(Reply.text("Hi", chunks=2, usage=(25, 12, 7, 3)), Reply.thinking("hmm"),
                Reply.tool_call("kb_search", {"q": "x"}))
    with client.messages.stream(model="m", max_tokens=9, messages=USER) as stream:  # type: ignore[arg-type]
        message = stream.get_final_message()
    assert message.usage.cache_read_input_tokens == 7 and message.usage.output_tokens == 12
    with client.messages.stream(model="m", max_tokens=9, messages=USER) as stream:  # type: ignore[arg-type]
        assert [b.type for b in stream.get_final_message().content] == ["thinking", "text"]
    with client.messages.stream(model="m", max_tokens=9, messages=USER) as stream:  # type: ignore[arg-type]
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize("status,openai_error", [(429, openai.RateLimitError),
                                                 (500, openai.InternalServerError),
                                                 (401, openai.AuthenticationError)])
def test_errors_carry_status_and_retry_after(fake: FakeLLM, status: int,
                                             openai_error: type[Exception]) -> None:
    fake.script(Reply.error(status, retry_after="1.5"))
    client = openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0)
    with pytest.raises(openai_error) as info:
        client.responses.create(model="m", input="x", stream=True)
    assert info.value.response.headers["retry-after"] == "1.5"  # type: ignore[attr-defined]


def test_a_cut_stream_ends_quietly_in_both_sdks(fake: FakeLLM) -> None:
    """The hard case: no exception, just no terminal event."""
    fake.script(Reply.cut(after=1), Reply.cut(after=1))
    oc = openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0)
    kinds = [e.type for e in oc.responses.create(model="m", input="x", stream=True)]
    assert kinds[-1] == "response.output_text.delta"
    ac = anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0)
    events = ac.messages.create(model="m", max_tokens=5, messages=USER, stream=True)  # type: ignore[arg-type]
    assert [e.type for e in events][-1] == "content_block_delta"


def test_close_from_another_thread_ends_a_hanging_stream(fake: FakeLLM) -> None:
    fake.script(Reply.hang(30))
    client = openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0)
    stream = client.responses.create(model="m", input="x", stream=True)
    events = iter(stream)
    assert next(events).type == "response.created"
    threading.Timer(0.2, stream.close).start()
    with pytest.raises(openai.APIConnectionError):
        for _ in events:
            pass
    assert fake.wait_closed(3)


def test_a_stamp_in_a_reply_is_the_clock_when_its_delta_is_sent() -> None:
    with FakeLLM() as fake:
        fake.script(Reply.text(f"{STAMP} ", chunks=1))
        client = openai.OpenAI(api_key="k", base_url=fake.openai_url, max_retries=0)
        before = time.monotonic()
        with client.responses.create(model="m", input="hi", stream=True) as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        assert before <= float(deltas[0]) <= time.monotonic()


def test_the_server_counts_requests_in_flight() -> None:
    import httpx2

    with FakeLLM(default=Reply.text("ok", delay_s=0.5)) as fake:
        client = openai.OpenAI(api_key="k", base_url=fake.openai_url, max_retries=0)
        calls = [threading.Thread(target=lambda: client.responses.create(model="m", input="hi"))
                 for _ in range(5)]
        for call in calls:
            call.start()
        for call in calls:
            call.join()
        stats = httpx2.get(f"{fake.url}/_stats/reset").json()
        assert stats == {"in_flight": 0, "max_in_flight": 5, "served": 5}
        assert fake.stats() == {"in_flight": 0, "max_in_flight": 0, "served": 0}
