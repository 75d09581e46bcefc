"""A local model server that speaks the wire protocols of the OpenAI Responses API, OpenAI
Chat Completions and Anthropic Messages, for the official SDKs (and hypha's model backends,
``ctx.llm``, the Claude Code and Codex CLIs) to talk to over real HTTP on loopback::

    with OpenAIServer() as server:
        server.script(Reply.text("Hello world", chunks=3))
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key)

The pytest fixtures ``hypha_openai_server`` and ``hypha_anthropic_server`` (docs/testing.md)
are an :class:`OpenAIServer` and an :class:`AnthropicServer`, one per test. Every server
answers all three routes (``/v1/responses``, ``/v1/chat/completions``, ``/v1/messages``);
the two classes differ in what they point a client at: ``base_url`` (the SDK's), ``env()``
(the SDK's environment variables) and ``base_urls`` (``Settings.model_base_urls``).

Each request takes the first scripted :class:`Reply` whose route matches (``None``: any),
else :attr:`FakeLLM.default`; a reply is rendered in the protocol of the route it answers:
server-sent events when the body asks for ``stream``, JSON otherwise. Every request is
kept in :attr:`FakeLLM.requests` (path, headers, JSON body). Streams are framed with
``Connection: close`` and no length, as a proxy may: a stream cut mid-way then looks like a
clean end of the body to the client (the hard case).

Only the standard library is imported: the module serves outside pytest too. Run as a
program (``python -m hypha_celery.testing.llm_server --port 0``) it prints its URL and
serves until killed, answering ``ok`` to everything (or ``--text``, ``--delay``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Self

from hypha_celery.jsontypes import JsonObject, JsonValue, json_object

__all__ = ["STAMP", "AnthropicServer", "FakeLLM", "OpenAIServer", "Reply", "Route", "Seen",
           "main"]

Route = Literal["responses", "chat", "messages"]
Frame = tuple[str | None, str]  # (SSE event name or None, data line)
#: In a reply's text, replaced on the wire by the server's ``time.monotonic()`` when the
#: frame is sent: a reader on this machine knows how long the delta took to reach it.
STAMP = "@@sent@@"
_ROUTES: dict[str, Route] = {"/v1/responses": "responses", "/v1/chat/completions": "chat",
                             "/v1/messages": "messages"}


@dataclass(frozen=True)
class Reply:
    """What one request gets. Build with the class methods."""

    kind: Literal["text", "tool_call", "thinking", "error", "cut", "malformed", "hang",
                  "stream_error"]
    content: str = "ok"
    chunks: int = 1
    delay_s: float = 0.0
    usage: tuple[int, int, int, int] = (10, 5, 0, 0)  # input, output, cache read, cache write
    tool: tuple[str, JsonObject, str] | None = None  # name, arguments, call id
    thought: str = ""
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    message: str = ""
    after: int = 0  # cut: deltas sent before the cut; hang: seconds to hang
    raw_thinking: bool = False  # thinking: Responses reasoning_text, not a summary

    @classmethod
    def text(cls, text: str, chunks: int = 1, delay_s: float = 0.0,
             usage: tuple[int, int, int, int] = (10, 5, 0, 0)) -> Reply:
        return cls("text", text, max(1, chunks), delay_s, usage)

    @classmethod
    def tool_call(cls, name: str, arguments: JsonObject, call_id: str = "call_1",
                  usage: tuple[int, int, int, int] = (10, 5, 0, 0)) -> Reply:
        return cls("tool_call", "", 1, 0.0, usage, (name, arguments, call_id))

    @classmethod
    def thinking(cls, thought: str, text: str = "ok", chunks: int = 1,
                 raw: bool = False) -> Reply:
        """``thought``, then ``text``: an Anthropic thinking block, a Chat Completions
        ``reasoning_content`` delta, a Responses reasoning item (its summary; ``raw``: its
        ``reasoning_text`` content)."""
        return cls("thinking", text, max(1, chunks), thought=thought, raw_thinking=raw)

    @classmethod
    def error(cls, status: int, retry_after: str | None = None, message: str = "fake error",
              headers: dict[str, str] | None = None) -> Reply:
        extra = dict(headers or {})
        if retry_after is not None:
            extra["retry-after"] = retry_after
        return cls("error", status=status, headers=tuple(extra.items()), message=message)

    @classmethod
    def cut(cls, after: int = 1, text: str = "partial answer that never ends") -> Reply:
        """``after`` text deltas, then the connection closes without a terminal event."""
        return cls("cut", text, max(after + 1, 2), after=after)

    @classmethod
    def stream_error(cls, kind: str = "overloaded_error", message: str = "Overloaded") -> Reply:
        """The first delta, then an error event inside the 200 stream: ``error`` (Responses,
        ``code`` = ``kind``), a ``{"error": ...}`` chunk (Chat), ``event: error`` (Messages)."""
        return cls("stream_error", "partial", 2, thought=kind, message=message)

    @classmethod
    def malformed(cls) -> Reply:
        """A stream in which one event's data is not JSON."""
        return cls("malformed", "abc", 2)

    @classmethod
    def hang(cls, seconds: float = 30.0) -> Reply:
        """The first delta, then nothing (keep-alive comments) for ``seconds``."""
        return cls("hang", "waiting", 2, after=int(seconds))


@dataclass(frozen=True)
class Seen:
    """One request the server got: its path (no query), headers (lower-case names) and
    JSON body (None when it was not JSON)."""

    path: str
    headers: dict[str, str]
    body: Any


def _test_key() -> str:
    return f"sk-hypha-test-{uuid.uuid4().hex[:16]}"


@dataclass
class FakeLLM:
    """The server, on ``127.0.0.1`` at a free port, serving from a daemon thread.

    ``default``: the reply when nothing scripted matches; ``requests``: every request so
    far; ``api_key``: the key :meth:`env` hands out (any key is accepted; this one is
    unique to the server, so an SDK client cached for another server is never reused).
    """

    default: Reply = field(default_factory=lambda: Reply.text("ok"))
    port: int = 0
    requests: list[Seen] = field(default_factory=list)
    api_key: str = field(default_factory=_test_key)
    _script: list[tuple[Route | None, Reply]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _open: int = 0
    _in_flight: int = 0
    _max_in_flight: int = 0
    _served: int = 0
    _server: ThreadingHTTPServer | None = None

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> Self:
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.fake = self
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-llm",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests use ---------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        """The OpenAI SDK's ``base_url`` (``.../v1``)."""
        return f"{self.url}/v1"

    @property
    def anthropic_url(self) -> str:
        """The Anthropic SDK's ``base_url`` (the SDK adds ``/v1/messages``)."""
        return self.url

    @property
    def base_urls(self) -> dict[str, str]:
        """``Settings.model_base_urls`` (``LLMClient(base_urls=...)``): hypha's model
        calls of the vendors this server stands for go to it."""
        return {"openai": self.openai_url, "anthropic": self.anthropic_url}

    def env(self) -> dict[str, str]:
        """Environment variables that point the official SDKs -- and with them hypha's
        model backends and ``ctx.llm``, in this process or a worker started with them --
        at this server: ``*_BASE_URL`` and ``*_API_KEY`` (:attr:`api_key`)."""
        return {"OPENAI_BASE_URL": self.openai_url, "OPENAI_API_KEY": self.api_key,
                "ANTHROPIC_BASE_URL": self.anthropic_url, "ANTHROPIC_API_KEY": self.api_key}

    def script(self, *replies: Reply, route: Route | None = None) -> None:
        """Queue replies for the next requests, in order; ``route`` (``"responses"``,
        ``"chat"``, ``"messages"``): only for requests to that route."""
        with self._lock:
            self._script.extend((route, r) for r in replies)

    @property
    def last(self) -> Seen:
        """The latest request (``IndexError`` when there was none)."""
        with self._lock:
            return self.requests[-1]

    def bodies(self, route: Route | None = None) -> list[Any]:
        """The JSON bodies of the requests so far (to ``route`` only, if given)."""
        with self._lock:
            return [seen.body for seen in self.requests
                    if route is None or _ROUTES.get(seen.path) == route]

    def reset(self) -> None:
        """Forget requests and scripted replies; the default reply is ``ok`` again."""
        with self._lock:
            self.requests.clear()
            self._script.clear()
            self.default = Reply.text("ok")

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._script)

    @property
    def open_streams(self) -> int:
        with self._lock:
            return self._open

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """True once no stream is being written (a client closed or every reply ended)."""
        end = time.monotonic() + timeout
        while self.open_streams and time.monotonic() < end:
            time.sleep(0.01)
        return self.open_streams == 0

    # -- server side --------------------------------------------------------------------
    def _take(self, route: Route) -> Reply:
        with self._lock:
            for i, (want, reply) in enumerate(self._script):
                if want is None or want == route:
                    del self._script[i]
                    return reply
        return self.default

    def stats(self) -> dict[str, int]:
        """Requests being answered now, the most at once so far, and answered in all
        (also served as ``GET /_stats``)."""
        with self._lock:
            return self._counts()

    def _counts(self) -> dict[str, int]:
        return {"in_flight": self._in_flight, "max_in_flight": self._max_in_flight,
                "served": self._served}

    def reset_stats(self) -> dict[str, int]:
        """Start counting afresh; returns the counts up to now (read and reset at once,
        so a caller that has the answer sees the counters already reset)."""
        with self._lock:
            seen = self._counts()
            self._max_in_flight, self._served = self._in_flight, 0
            return seen

    def _handling(self, delta: int) -> None:
        with self._lock:
            self._in_flight += delta
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            self._served += delta < 0

    def _streaming(self, delta: int) -> None:
        with self._lock:
            self._open += delta


@dataclass
class OpenAIServer(FakeLLM):
    """The server as OpenAI (the ``hypha_openai_server`` fixture): ``base_url`` is
    ``.../v1``; ``env()`` and ``base_urls`` point only OpenAI clients here."""

    @property
    def base_url(self) -> str:
        return self.openai_url

    @property
    def base_urls(self) -> dict[str, str]:
        return {"openai": self.openai_url}

    def env(self) -> dict[str, str]:
        return {"OPENAI_BASE_URL": self.openai_url, "OPENAI_API_KEY": self.api_key}


@dataclass
class AnthropicServer(FakeLLM):
    """The server as Anthropic (the ``hypha_anthropic_server`` fixture): ``base_url`` is
    the root; ``env()`` and ``base_urls`` point only Anthropic clients here."""

    @property
    def base_url(self) -> str:
        return self.anthropic_url

    @property
    def base_urls(self) -> dict[str, str]:
        return {"anthropic": self.anthropic_url}

    def env(self) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": self.anthropic_url, "ANTHROPIC_API_KEY": self.api_key}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    fake: FakeLLM

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return  # the client hung up before its answer left (its timeout, a cancel):
            # a whole answer's flush or a stream's frame, told nowhere else
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # A buffered reply: a whole answer leaves when the handler returns (a stream flushes
    # each frame), so a client holding its answer finds the request counted as served.
    wbufsize = -1

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return None

    def do_POST(self) -> None:
        fake = self.server.fake
        fake._handling(+1)
        try:
            self._post()
        finally:
            fake._handling(-1)

    def _post(self) -> None:
        path = self.path.split("?", 1)[0]
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        fake = self.server.fake
        with fake._lock:
            fake.requests.append(Seen(path, {k.lower(): v for k, v in self.headers.items()},
                                      body))
        route = _ROUTES.get(path)
        if route is None or not isinstance(body, dict):
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        reply = fake._take(route)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.kind == "error":
            self._error(route, reply)
        elif body.get("stream"):
            self._stream(route, reply, body)
        else:
            self._json(200, _whole(route, reply, body))

    def do_GET(self) -> None:  # the server's counters; else a CLI's stray GET
        fake = self.server.fake
        if self.path in ("/_stats", "/_stats/reset"):
            self._json(200, fake.reset_stats() if self.path.endswith("/reset") else fake.stats())
            return
        self._json(404, {"error": {"message": "not found", "type": "not_found"}})

    # -- replies ----------------------------------------------------------------------
    def _json(self, status: int, doc: Any, headers: tuple[tuple[str, str], ...] = ()) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, route: Route, reply: Reply) -> None:
        if route == "messages":
            kind = {429: "rate_limit_error", 401: "authentication_error", 529: "overloaded_error",
                    400: "invalid_request_error"}.get(reply.status, "api_error")
            doc: JsonObject = {"type": "error", "request_id": "req_fake",
                                   "error": {"type": kind, "message": reply.message}}
        else:
            doc = {"error": {"message": reply.message, "type": "fake_error", "param": None,
                             "code": str(reply.status)}}
        self._json(reply.status, doc, (("x-should-retry", "false"), *reply.headers))

    def _stream(self, route: Route, reply: Reply, body: JsonObject) -> None:
        frames = list(_frames(route, reply, body))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        fake = self.server.fake
        fake._streaming(+1)
        try:  # a client that closes the stream (a cancel) is the server's handle_error's
            self._write_frames(reply, frames)
        finally:
            fake._streaming(-1)

    def _write_frames(self, reply: Reply, frames: list[Frame]) -> None:
        if reply.kind in ("cut", "hang"):
            frames = _through_delta(frames, reply.after if reply.kind == "cut" else 1)
        for name, data in frames:
            if STAMP in data:  # the clock at the moment of sending (bench/models.py)
                data = data.replace(STAMP, f"{time.monotonic():.6f}")
            head = f"event: {name}\n" if name else ""
            self.wfile.write(f"{head}data: {data}\n\n".encode())
            self.wfile.flush()
        if reply.kind == "hang":
            end = time.monotonic() + reply.after
            while time.monotonic() < end:
                time.sleep(0.1)
                self.wfile.write(b": keepalive\n\n")
                self.wfile.flush()


def _through_delta(frames: list[Frame], deltas: int) -> list[Frame]:
    """The frames up to and including the ``deltas``-th text delta."""
    seen = 0
    for i, (_, data) in enumerate(frames):
        if _is_delta(data):
            seen += 1
            if seen >= deltas:
                return frames[: i + 1]
    return frames[:1]


def _is_delta(data: str) -> bool:
    return ('"response.output_text.delta"' in data or '"text_delta"' in data
            or ('"chat.completion.chunk"' in data and '"content": "' in data
                and '"content": ""' not in data))


def _split(text: str, chunks: int) -> list[str]:
    size = max(1, -(-len(text) // chunks))
    parts = [text[i:i + size] for i in range(0, len(text), size)] or [""]
    return parts


def _frames(route: Route, reply: Reply, body: JsonObject) -> Iterator[Frame]:
    render = {"responses": _responses, "chat": _chat, "messages": _messages}[route]
    frames = list(render(reply, str(body.get("model") or "fake-model"), body))
    if reply.kind == "stream_error":
        frames = [*_through_delta(frames, 1), _stream_error(route, reply)]
    if reply.kind == "malformed":
        for i, (name, data) in enumerate(frames):
            if _is_delta(data):
                frames[i] = (name, data[: len(data) // 2] + "<<not json")
                break
    yield from frames


def _stream_error(route: Route, reply: Reply) -> Frame:
    if route == "messages":
        return "error", json.dumps({"type": "error", "error": {"type": reply.thought,
                                                               "message": reply.message}})
    if route == "chat":
        return None, json.dumps({"error": {"message": reply.message, "type": reply.thought,
                                           "code": reply.thought}})
    return "error", json.dumps({"type": "error", "code": reply.thought, "message": reply.message,
                                "param": None, "sequence_number": 99})


# -- OpenAI Responses ---------------------------------------------------------------------
def _responses(reply: Reply, model: str, body: JsonObject) -> Iterator[Frame]:
    seq = itertools.count()
    rid = f"resp_{uuid.uuid4().hex[:12]}"

    def ev(kind: str, **data: Any) -> Frame:
        return kind, json.dumps({"type": kind, "sequence_number": next(seq), **data})

    def resp(status: str, output: list[Any], usage: Any) -> JsonObject:
        return {"id": rid, "object": "response", "created_at": int(time.time()),
                "status": status, "model": model, "output": output, "usage": usage,
                "error": None, "incomplete_details": None, "parallel_tool_calls": True,
                "tool_choice": "auto", "tools": []}

    yield ev("response.created", response=resp("in_progress", [], None))
    items: list[JsonObject] = []
    index = 0
    if reply.kind == "thinking":
        yield from _responses_reasoning(ev, reply.thought, index, items, reply.raw_thinking)
        index += 1
    if reply.kind == "tool_call":
        yield from _responses_call(ev, reply, index, items)
    else:
        yield from _responses_text(ev, reply, index, items)
    yield ev("response.completed", response=resp("completed", items, _openai_usage(reply)))


def _responses_text(ev: Any, reply: Reply, index: int,
                    items: list[JsonObject]) -> Iterator[Frame]:
    mid = f"msg_{uuid.uuid4().hex[:12]}"
    at = {"item_id": mid, "output_index": index, "content_index": 0}
    yield ev("response.output_item.added", output_index=index,
             item={"id": mid, "type": "message", "status": "in_progress", "role": "assistant",
                   "content": []})
    yield ev("response.content_part.added", **at,
             part={"type": "output_text", "text": "", "annotations": []})
    for part in _split(reply.content, reply.chunks):
        yield ev("response.output_text.delta", **at, delta=part, logprobs=[])
    done: JsonObject = {"type": "output_text", "text": reply.content, "annotations": []}
    yield ev("response.output_text.done", **at, text=reply.content, logprobs=[])
    yield ev("response.content_part.done", **at, part=done)
    item: JsonObject = {"id": mid, "type": "message", "status": "completed",
                        "role": "assistant", "content": [done]}
    items.append(item)
    yield ev("response.output_item.done", output_index=index, item=item)


def _responses_call(ev: Any, reply: Reply, index: int,
                    items: list[JsonObject]) -> Iterator[Frame]:
    assert reply.tool is not None
    name, arguments, call_id = reply.tool
    fid, args = f"fc_{uuid.uuid4().hex[:12]}", json.dumps(arguments)
    item: JsonObject = {"id": fid, "type": "function_call", "status": "in_progress",
                        "call_id": call_id, "name": name, "arguments": ""}
    yield ev("response.output_item.added", output_index=index, item=item)
    for part in _split(args, 2):
        yield ev("response.function_call_arguments.delta", item_id=fid, output_index=index,
                 delta=part)
    yield ev("response.function_call_arguments.done", item_id=fid, output_index=index,
             arguments=args)
    done: JsonObject = {**item, "status": "completed", "arguments": args}
    items.append(done)
    yield ev("response.output_item.done", output_index=index, item=done)


def _responses_reasoning(ev: Any, thought: str, index: int, items: list[JsonObject],
                         raw: bool = False) -> Iterator[Frame]:
    rid = f"rs_{uuid.uuid4().hex[:12]}"
    if raw:
        yield from _responses_reasoning_text(ev, rid, thought, index, items)
        return
    at = {"item_id": rid, "output_index": index, "summary_index": 0}
    yield ev("response.output_item.added", output_index=index,
             item={"id": rid, "type": "reasoning", "summary": []})
    yield ev("response.reasoning_summary_part.added", **at,
             part={"type": "summary_text", "text": ""})
    yield ev("response.reasoning_summary_text.delta", **at, delta=thought)
    yield ev("response.reasoning_summary_text.done", **at, text=thought)
    part: JsonObject = {"type": "summary_text", "text": thought}
    yield ev("response.reasoning_summary_part.done", **at, part=part)
    item: JsonObject = {"id": rid, "type": "reasoning", "summary": [part]}
    items.append(item)
    yield ev("response.output_item.done", output_index=index, item=item)


def _responses_reasoning_text(ev: Any, rid: str, thought: str, index: int,
                              items: list[JsonObject]) -> Iterator[Frame]:
    at = {"item_id": rid, "output_index": index, "content_index": 0}
    yield ev("response.output_item.added", output_index=index,
             item={"id": rid, "type": "reasoning", "summary": []})
    yield ev("response.reasoning_text.delta", **at, delta=thought)
    yield ev("response.reasoning_text.done", **at, text=thought)
    item: JsonObject = {"id": rid, "type": "reasoning", "summary": [],
                        "content": [{"type": "reasoning_text", "text": thought}]}
    items.append(item)
    yield ev("response.output_item.done", output_index=index, item=item)


def _openai_usage(reply: Reply) -> JsonObject:
    inp, out, read, write = reply.usage
    return {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
            "input_tokens_details": {"cached_tokens": read, "cache_write_tokens": write},
            "output_tokens_details": {"reasoning_tokens": 0}}


# -- OpenAI Chat Completions ----------------------------------------------------------------
def _chat(reply: Reply, model: str, body: JsonObject) -> Iterator[Frame]:
    cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
    with_usage = bool(json_object(body.get("stream_options")).get("include_usage"))

    def chunk(delta: JsonObject, finish: str | None = None,
              choices: bool = True, usage: Any = None) -> Frame:
        doc: JsonObject = {"id": cid, "object": "chat.completion.chunk",
                               "created": int(time.time()), "model": model,
                               "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                            "finish_reason": finish}] if choices else []}
        if with_usage:
            doc["usage"] = usage
        return None, json.dumps(doc)

    if reply.kind == "tool_call":
        assert reply.tool is not None
        name, arguments, call_id = reply.tool
        parts = _split(json.dumps(arguments), 2)
        yield chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": call_id, "type": "function",
             "function": {"name": name, "arguments": ""}}]})
        for part in parts:
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
        yield chunk({}, "tool_calls")
    else:
        yield chunk({"role": "assistant", "content": "", "refusal": None})
        if reply.kind == "thinking":
            yield chunk({"reasoning_content": reply.thought})
        for part in _split(reply.content, reply.chunks):
            yield chunk({"content": part})
        yield chunk({}, "stop")
    if with_usage:
        yield chunk({}, choices=False, usage=_chat_usage(reply))
    yield None, "[DONE]"


def _chat_usage(reply: Reply) -> JsonObject:
    inp, out, read, write = reply.usage
    return {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out,
            "prompt_tokens_details": {"cached_tokens": read, "cache_write_tokens": write}}


# -- Anthropic Messages ---------------------------------------------------------------------
def _messages(reply: Reply, model: str, body: JsonObject) -> Iterator[Frame]:
    def ev(kind: str, **data: Any) -> Frame:
        return kind, json.dumps({"type": kind, **data})

    inp, out, read, write = reply.usage
    yield ev("message_start", message={
        "id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant",
        "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": inp, "output_tokens": 1, "cache_creation_input_tokens": write,
                  "cache_read_input_tokens": read}})
    index = 0
    if reply.kind == "thinking":
        yield ev("content_block_start", index=index,
                 content_block={"type": "thinking", "thinking": "", "signature": ""})
        yield ev("content_block_delta", index=index,
                 delta={"type": "thinking_delta", "thinking": reply.thought})
        yield ev("content_block_delta", index=index,
                 delta={"type": "signature_delta", "signature": "c2lnbmF0dXJl"})
        yield ev("content_block_stop", index=index)
        index += 1
    stop = "end_turn"
    if reply.kind == "tool_call":
        assert reply.tool is not None
        name, arguments, call_id = reply.tool
        yield ev("content_block_start", index=index, content_block={
            "type": "tool_use", "id": call_id, "name": name, "input": {}})
        for part in _split(json.dumps(arguments), 2):
            yield ev("content_block_delta", index=index,
                     delta={"type": "input_json_delta", "partial_json": part})
        stop = "tool_use"
    else:
        yield ev("content_block_start", index=index,
                 content_block={"type": "text", "text": ""})
        yield "ping", json.dumps({"type": "ping"})
        for part in _split(reply.content, reply.chunks):
            yield ev("content_block_delta", index=index,
                     delta={"type": "text_delta", "text": part})
    yield ev("content_block_stop", index=index)
    yield ev("message_delta", delta={"stop_reason": stop, "stop_sequence": None},
             usage={"output_tokens": out})
    yield ev("message_stop")


# -- non-streamed replies --------------------------------------------------------------------
def _whole(route: Route, reply: Reply, body: JsonObject) -> JsonObject:
    """The non-streamed answer: the streamed one's final object."""
    model = str(body.get("model") or "fake-model")
    if route == "responses":
        last = json.loads(list(_responses(reply, model, body))[-1][1])
        return dict(last["response"])
    if route == "chat":
        message: JsonObject = {"role": "assistant", "content": reply.content, "refusal": None}
        if reply.kind == "tool_call" and reply.tool is not None:
            name, arguments, call_id = reply.tool
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments)}}]}
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                             "finish_reason": "stop"}],
                "usage": _chat_usage(reply)}
    inp, out, read, write = reply.usage
    content: list[JsonValue] = [{"type": "text", "text": reply.content}]
    if reply.kind == "tool_call" and reply.tool is not None:
        name, arguments, call_id = reply.tool
        content = [{"type": "tool_use", "id": call_id, "name": name, "input": arguments}]
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": inp, "output_tokens": out,
                      "cache_creation_input_tokens": write, "cache_read_input_tokens": read}}


def main() -> None:
    """``python -m hypha_celery.testing.llm_server``: serve until killed."""
    parser = argparse.ArgumentParser(description="A local model server (OpenAI Responses, "
                                     "Chat Completions, Anthropic Messages) for tests.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--text", default="ok")
    parser.add_argument("--chunks", type=int, default=1)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    args = parser.parse_args()
    fake = FakeLLM(default=Reply.text(args.text, chunks=args.chunks, delay_s=args.delay),
                   port=args.port).start()
    print(fake.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
