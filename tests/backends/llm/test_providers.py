"""The provider modules over real HTTP: the official SDKs talk to the fake model server,
once per API (Responses, Chat Completions, Messages)."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from hypha_celery.backends import BackendError, BackendEvent
from hypha_celery.backends.llm.types import Usage
from tests.backends.llm.support import (
    KEY,
    ROUTES,
    SEARCH,
    call,
    open_call,
    sent,
)
from tests.fakes.llm_server import FakeLLM, Reply


def test_text_streams_as_deltas_then_usage_with_cache_tokens(fake: FakeLLM, api: str) -> None:
    fake.script(Reply.text("Hello world", chunks=3, usage=(11, 3, 4, 1)))
    out = call(fake, api)
    assert out.error is None and out.result is not None
    assert out.kinds() == ["text", "text", "text", "usage"]
    assert out.text() == out.result.text == "Hello world"
    # input_tokens counts every input token: Anthropic reports the cached ones apart
    total_in = 11 + 4 + 1 if api == "messages" else 11
    assert out.result.usage == Usage(total_in, 3, 4, 1)
    assert out.events[-1].data == out.result.usage.to_json()
    assert out.result.stop_reason in ("completed", "stop", "end_turn")
    assert out.result.model == ("claude-test" if api == "messages" else "gpt-test")
    assert fake.requests[-1].path == ROUTES[api]


def test_a_tool_call_arrives_whole_under_its_declared_name(fake: FakeLLM, api: str) -> None:
    fake.script(Reply.tool_call("kb_search", {"q": "x"}, call_id="call_7"))
    out = call(fake, api, tools=(SEARCH,))
    assert out.result is not None, out.error
    uses = [e.data for e in out.events if e.kind == "tool_use"]
    assert uses == [{"id": "call_7", "name": "kb.search", "input": {"q": "x"}}]
    assert [c.to_json() for c in out.result.tool_calls] == [
        {"id": "call_7", "name": "kb.search", "arguments": {"q": "x"}}]
    assert out.kinds()[-1] == "usage"
    assert json.dumps(sent(fake)).count('"kb_search"') == 1  # the wire name, declared once


def test_reasoning_is_a_character_count_never_the_text(fake: FakeLLM, api: str) -> None:
    fake.script(Reply.thinking("secret reasoning", text="fine"))
    out = call(fake, api)
    assert out.result is not None and out.result.text == "fine"
    if api != "chat":  # the fake's Chat Completions renders no reasoning
        assert [e.data for e in out.events if e.kind == "reasoning"] == [{"chars": 16}]
    assert "secret" not in json.dumps([e.to_json() for e in out.events])
    assert "secret" not in json.dumps(out.result.to_json())


@pytest.mark.parametrize(("status", "kind", "retryable"), [
    (500, "server_error", True), (401, "authentication", False),
    (403, "authentication", False), (400, "invalid_request", False),
    (404, "invalid_request", False), (422, "invalid_request", False),
    (529, "server_error", True)])
def test_http_errors_are_normalized(fake: FakeLLM, api: str, status: int, kind: str,
                                    retryable: bool) -> None:
    fake.script(Reply.error(status))
    with pytest.raises(BackendError) as caught:
        open_call(fake, api)
    err = caught.value
    assert (err.kind, err.retryable, err.status) == (kind, retryable, status)
    assert err.provider == ("anthropic" if api == "messages" else "openai")
    assert "fake error" in err.message  # the provider's reason, for operators
    assert len(fake.requests) == 1  # the SDK did not retry


def test_rate_limited_carries_retry_after(fake: FakeLLM, api: str) -> None:
    fake.script(Reply.error(429, retry_after="1.5"),
                Reply.error(429, headers={"retry-after-ms": "250", "retry-after": "9"}),
                Reply.error(429))
    found = []
    for _ in range(3):
        with pytest.raises(BackendError) as caught:
            open_call(fake, api)
        found.append((caught.value.kind, caught.value.retryable, caught.value.retry_after))
    assert found == [("rate_limited", True, 1.5), ("rate_limited", True, 0.25),
                     ("rate_limited", True, None)]
    assert caught.value.to_json()["retry_after"] is None


def test_connection_refused_is_a_retryable_transport_error(fake: FakeLLM, api: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}" + ("" if api == "messages" else "/v1")
    with pytest.raises(BackendError) as caught:
        open_call(fake, api, url=url)
    assert (caught.value.kind, caught.value.retryable) == ("transport", True)


def test_a_cut_stream_fails_and_is_never_a_short_answer(fake: FakeLLM, api: str) -> None:
    fake.script(Reply.cut(after=2))
    out = call(fake, api)
    assert out.error is not None and out.result is None
    assert (out.error.kind, out.error.retryable) == ("incomplete_stream", True)
    assert 1 <= out.kinds().count("text") <= 2 and "usage" not in out.kinds()


def test_a_malformed_event_fails_the_call(fake: FakeLLM, api: str) -> None:
    fake.script(Reply.malformed())
    out = call(fake, api)
    assert out.error is not None and out.result is None
    assert (out.error.kind, out.error.retryable) == ("malformed_stream", False)


def test_close_from_another_thread_ends_a_hanging_stream(fake: FakeLLM, api: str) -> None:
    fake.script(Reply.hang(30))
    stream = open_call(fake, api)
    seen: list[BackendEvent] = []
    failed: list[BackendError] = []

    def read() -> None:
        try:
            seen.extend(stream)
        except BackendError as exc:
            failed.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.open_streams == 1
    started = time.monotonic()
    stream.close()
    stream.close()  # idempotent
    reader.join(5)
    assert not reader.is_alive() and time.monotonic() - started < 1.0
    assert [e.kind for e in failed] == ["cancelled"] and stream.result is None
    assert fake.wait_closed(5)


def test_a_break_with_the_stream_as_context_closes_it(fake: FakeLLM, api: str) -> None:
    fake.script(Reply.hang(30))
    with open_call(fake, api) as stream:
        for _ in stream:
            break
    assert stream.closed and fake.wait_closed(5)


def test_history_and_tools_translate_to_each_api(fake: FakeLLM, api: str) -> None:
    history = ({"role": "system", "content": "be brief"},
               {"role": "user", "content": "find x"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "call_1", "name": "kb.search", "arguments": {"q": "x"}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "found"},
               {"role": "user", "content": "thanks"})
    assert call(fake, api, messages=history, tools=(SEARCH,), max_output_tokens=64).result
    body = sent(fake)
    assert body["stream"] is True and body["model"] in ("gpt-test", "claude-test")
    if api == "responses":
        assert body["instructions"] == "be brief" and body["max_output_tokens"] == 64
        assert [i.get("type", i.get("role")) for i in body["input"]] == [
            "user", "function_call", "function_call_output", "user"]
        assert body["input"][1]["name"] == "kb_search" and body["store"] is False
        assert body["tools"][0]["parameters"] == SEARCH.parameters
    elif api == "chat":
        assert [m["role"] for m in body["messages"]] == [
            "system", "user", "assistant", "tool", "user"]
        assert body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 64
        assert body["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"q":"x"}'
    else:
        assert body["system"] == "be brief" and body["max_tokens"] == 64
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
        assert [b["type"] for b in body["messages"][2]["content"]] == ["tool_result", "text"]
        assert body["tools"][0]["input_schema"] == SEARCH.parameters


def test_the_key_goes_in_the_auth_header_only(fake: FakeLLM, api: str) -> None:
    assert call(fake, api).result is not None
    seen = fake.requests[-1]
    assert KEY in (seen.headers.get("authorization", "") + seen.headers.get("x-api-key", ""))
    assert KEY not in json.dumps(seen.body)


def test_refused_requests_fail_before_anything_is_sent(fake: FakeLLM, api: str) -> None:
    bad = [{"messages": ({"role": "robot", "content": "x"},)},
           {"nonsense_option": 1},
           {"messages": ({"role": "user", "content": ["parts"]},)},
           {"messages": ({"role": "tool", "content": "no call id"},)}]
    for kwargs in bad:
        with pytest.raises(BackendError) as caught:
            open_call(fake, api, **kwargs)  # type: ignore[arg-type]
        assert (caught.value.kind, caught.value.retryable) == ("invalid_request", False)
    assert fake.requests == []



@pytest.mark.parametrize(("error_type", "kind", "retryable"), [
    ("overloaded_error", "server_error", True), ("rate_limit_error", "rate_limited", True),
    ("invalid_request_error", "invalid_request", False), ("brand_new", "provider_error", False)])
def test_an_error_event_inside_the_stream_fails_the_call(
        fake: FakeLLM, api: str, error_type: str, kind: str, retryable: bool) -> None:
    fake.script(Reply.stream_error(error_type, message=f"busy, key {KEY}"))
    out = call(fake, api)
    assert out.error is not None and out.result is None
    assert (out.error.kind, out.error.retryable) == (kind, retryable)
    assert out.kinds() == ["text"] and KEY not in out.error.message


# A proxy framing the stream with chunked transfer-encoding that dies mid-body: the SDKs
# raise (OpenAI wraps httpx's RemoteProtocolError, Anthropic does not) rather than end.
_FIRST_DELTA = {
    "responses": 'event: response.output_text.delta\ndata: {"type": '
                 '"response.output_text.delta", "sequence_number": 1, "item_id": "m", '
                 '"output_index": 0, "content_index": 0, "delta": "par"}\n\n',
    "chat": 'data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", '
            '"choices": [{"index": 0, "delta": {"content": "par"}, "finish_reason": null}]}\n\n',
    "messages": 'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
                '"delta": {"type": "text_delta", "text": "par"}}\n\n',
}


def _serve_one_cut_chunked(api: str) -> tuple[str, threading.Thread]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            body = head.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:
                body += conn.recv(65536)
            data = _FIRST_DELTA[api].encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n"
                         + f"{len(data):x}\r\n".encode() + data + b"\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    return f"http://127.0.0.1:{port}" + ("" if api == "messages" else "/v1"), thread


def test_a_chunked_stream_cut_mid_body_is_incomplete_too(fake: FakeLLM, api: str) -> None:
    url, thread = _serve_one_cut_chunked(api)
    out = call(fake, api, url=url)
    thread.join(5)
    assert out.text() == "par" and out.result is None and out.error is not None
    assert (out.error.kind, out.error.retryable) == ("incomplete_stream", True)
