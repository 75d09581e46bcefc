"""The Anthropic provider: the Messages API streamed through the official ``anthropic`` SDK.

Requests go through the SDK (``messages.with_streaming_response.create(stream=True)``) on
a client built with ``max_retries=0``; the event stream is read by
:mod:`~hypha_celery.backends.llm.sse` and
:class:`~hypha_celery.backends.llm.stream.LLMStream` owns the response and closes it. A cut
stream can end without an error, so the decoder checks that ``message_stop`` came:
without it the call fails ``incomplete_stream``.

Thinking blocks are reported as a ``reasoning`` event with their character count, never
their text, and are not kept in the conversation. So a tool-use turn with extended
thinking cannot be continued from a stored history (the API wants the signed thinking
blocks back); use thinking for turns that do not call tools.

Usage: ``input_tokens`` counts every input token (Anthropic's uncached ``input_tokens``
plus ``cache_creation_input_tokens`` and ``cache_read_input_tokens``, as OpenAI counts
them); ``cache_write_tokens`` / ``cache_read_tokens`` are those two parts.

Options: ``max_output_tokens`` (the API's required ``max_tokens``; default 4,096),
``temperature``, ``top_p``, ``thinking_budget`` (enables extended thinking).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic

from hypha_celery.backends.error import BackendError
from hypha_celery.backends.event import BackendEvent
from hypha_celery.backends.llm import cancel, errors, ref
from hypha_celery.backends.llm.sdk import ClientCache
from hypha_celery.backends.llm.sse import open_raw
from hypha_celery.backends.llm.stream import LLMStream
from hypha_celery.backends.llm.types import LLMRequest, LLMResult, Message, ToolCall, Usage
from hypha_celery.backends.llm.wire import ToolNames, check_options, parse_arguments, text

__all__ = ["DEFAULT_MAX_TOKENS", "OPTIONS", "VENDOR", "open_stream"]

VENDOR = "anthropic"
OPTIONS = ref.OPTIONS[VENDOR]
DEFAULT_MAX_TOKENS = 4096
_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                 "cache_read_input_tokens")


def _build(key: str, base_url: str | None, timeout: float) -> anthropic.Anthropic:
    http = anthropic.DefaultHttpxClient(transport=cancel.transport())
    return cancel.closing(anthropic.Anthropic(api_key=key, base_url=base_url, timeout=timeout,
                                              max_retries=0, http_client=http), http)


_clients = ClientCache(_build)


def open_stream(request: LLMRequest, *, key: str, base_url: str | None,
                timeout: float) -> LLMStream:
    """Send ``request`` and return its stream once the response headers arrived. Raises
    ``BackendError``: ``invalid_request`` for a request this module refuses (nothing is
    sent), else the kind of the HTTP or connection failure."""
    try:
        check_options(request.options, OPTIONS)
        names = ToolNames(request.tools)
        body = _body(request, names)
    except (ValueError, KeyError, TypeError) as exc:
        raise BackendError(VENDOR, "invalid_request", False,
                           message=f"{type(exc).__name__}: {exc}") from None
    error: BackendError | None = None
    try:
        create: Any = _clients.get(key, base_url, timeout).messages.with_streaming_response
        sdk = open_raw(VENDOR, create.create(**body, stream=True))
    except errors.PASSTHROUGH:
        raise
    except Exception as exc:
        error = errors.from_exception(VENDOR, exc, key=key)
    if error is not None:
        raise error  # outside the handler: the SDK exception may quote an echoed key
    return LLMStream(VENDOR, sdk, _Messages(names, request.model), key=key)


# -- request ---------------------------------------------------------------------------
def _body(request: LLMRequest, names: ToolNames) -> dict[str, Any]:
    system = [text(m) for m in request.messages if m.get("role") == "system"]
    turns: list[dict[str, Any]] = []
    for message in request.messages:
        if message.get("role") == "system":
            continue
        role, blocks = _blocks(message, names)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    opts = request.options
    body: dict[str, Any] = {"model": request.model, "messages": turns,
                            "max_tokens": opts.get("max_output_tokens", DEFAULT_MAX_TOKENS)}
    if system:
        body["system"] = "\n\n".join(system)
    if request.tools:
        body["tools"] = [{"name": names.wire(t.name), "description": t.description,
                          "input_schema": t.parameters} for t in request.tools]
    for name in ("temperature", "top_p"):
        if name in opts:
            body[name] = opts[name]
    if "thinking_budget" in opts:
        body["thinking"] = {"type": "enabled", "budget_tokens": opts["thinking_budget"]}
    return body


def _blocks(message: Message, names: ToolNames) -> tuple[str, list[dict[str, Any]]]:
    role = message.get("role")
    content = text(message)
    if role == "user":
        return "user", [{"type": "text", "text": content}] if content else []
    if role == "tool":
        return "user", [{"type": "tool_result", "tool_use_id": message["tool_call_id"],
                         "content": content}]
    if role != "assistant":
        raise ValueError(f"unknown message role {role!r}")
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    blocks.extend({"type": "tool_use", "id": c["id"], "name": names.wire(c["name"]),
                   "input": c.get("arguments") or {}} for c in message.get("tool_calls") or ())
    return "assistant", blocks


# -- stream ----------------------------------------------------------------------------
class _Messages:
    """Decodes Messages stream events (see the provider reference, section 3)."""

    def __init__(self, names: ToolNames, model: str) -> None:
        self._names = names
        self._model = model
        self._id: str | None = None
        self._text: list[str] = []
        self._blocks: dict[int, dict[str, Any]] = {}  # index -> tool_use / thinking block
        self._calls: list[ToolCall] = []
        self._usage: dict[str, int] = {}
        self._stop: str | None = None
        self._stopped = False

    def feed(self, raw: Any) -> list[BackendEvent]:
        kind = getattr(raw, "type", "")
        if kind == "content_block_delta":  # the hot path: most events are text deltas
            delta = raw.delta
            if delta.type == "text_delta":
                piece = delta.text
                if not piece:
                    return []
                self._text.append(piece)
                return [BackendEvent.text(piece)]
        handler = _EVENTS.get(kind)
        return handler(self, raw) if handler is not None else []

    def _start(self, raw: Any) -> list[BackendEvent]:
        message = raw.message
        self._id = getattr(message, "id", None)
        self._model = getattr(message, "model", None) or self._model
        self._count(getattr(message, "usage", None))
        return []

    def _block_start(self, raw: Any) -> list[BackendEvent]:
        block = raw.content_block
        if block.type == "text":
            return self._say(getattr(block, "text", "") or "")
        if block.type == "tool_use":
            self._blocks[raw.index] = {"kind": "tool", "id": block.id, "name": block.name,
                                       "args": []}
        elif block.type in ("thinking", "redacted_thinking"):
            thought = getattr(block, "thinking", "") or ""
            self._blocks[raw.index] = {"kind": "thinking", "chars": len(thought)}
        return []

    def _delta(self, raw: Any) -> list[BackendEvent]:
        delta = raw.delta
        if delta.type == "text_delta":
            return self._say(delta.text or "")
        block = self._blocks.get(raw.index)
        if block is None:
            return []
        if delta.type == "input_json_delta" and block["kind"] == "tool":
            block["args"].append(delta.partial_json or "")
        elif delta.type == "thinking_delta" and block["kind"] == "thinking":
            block["chars"] += len(delta.thinking or "")
        return []

    def _block_stop(self, raw: Any) -> list[BackendEvent]:
        block = self._blocks.pop(raw.index, None)
        if block is None:
            return []
        if block["kind"] == "thinking":
            return [BackendEvent.new("reasoning", {"chars": block["chars"]})]
        call = ToolCall(block["id"], self._names.name(block["name"]),
                        parse_arguments("".join(block["args"])))
        self._calls.append(call)
        return [BackendEvent.new("tool_use", {"id": call.id, "name": call.name,
                                              "input": call.arguments})]

    def _message_delta(self, raw: Any) -> list[BackendEvent]:
        self._stop = getattr(raw.delta, "stop_reason", None) or self._stop
        self._count(getattr(raw, "usage", None))
        return []

    def _message_stop(self, raw: Any) -> list[BackendEvent]:
        self._stopped = True
        return []

    def _say(self, delta: str) -> list[BackendEvent]:
        if not delta:
            return []
        self._text.append(delta)
        return [BackendEvent.text(delta)]

    def _count(self, usage: Any) -> None:
        """Usage counts are cumulative: a later value replaces an earlier one."""
        for name in _USAGE_FIELDS:
            value = getattr(usage, name, None) if usage is not None else None
            if isinstance(value, int) and not isinstance(value, bool):
                self._usage[name] = value

    def finish(self) -> tuple[list[BackendEvent], LLMResult]:
        if not self._stopped:
            raise errors.incomplete_stream(VENDOR, "no message_stop event")
        counts = self._usage
        write = counts.get("cache_creation_input_tokens", 0)
        read = counts.get("cache_read_input_tokens", 0)
        usage = Usage(counts.get("input_tokens", 0) + write + read,
                      counts.get("output_tokens", 0), read, write)
        return [BackendEvent.new("usage", usage.to_json())], LLMResult(
            "".join(self._text), tuple(self._calls), usage, self._stop, self._model, self._id)


_EVENTS: dict[str, Callable[[_Messages, Any], list[BackendEvent]]] = {
    "message_start": _Messages._start,
    "content_block_start": _Messages._block_start,
    "content_block_delta": _Messages._delta,
    "content_block_stop": _Messages._block_stop,
    "message_delta": _Messages._message_delta,
    "message_stop": _Messages._message_stop,
}
