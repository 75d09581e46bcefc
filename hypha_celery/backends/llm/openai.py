"""The OpenAI provider: the Responses API (default) or Chat Completions (``api="chat"``,
the ``openai-chat`` provider), streamed through the official ``openai`` SDK.

Any OpenAI-compatible server works through ``base_url`` (``http://host:8000/v1`` for
vLLM, ``http://localhost:11434/v1`` for Ollama, a LiteLLM proxy): most speak Chat
Completions only, so use ``openai-chat`` with them.

Requests go through the SDK (``responses.create(stream=True)``,
``chat.completions.create(stream=True, stream_options={"include_usage": True})``, both
``with_streaming_response``) on a client built with ``max_retries=0``; the event stream is
read by :mod:`~hypha_celery.backends.llm.sse` (the SDK's per-event models cost more than
the rest of the call) and :class:`~hypha_celery.backends.llm.stream.LLMStream` owns the
response and closes it. Responses are sent with ``store: false`` and the whole
history in ``input`` (no server-side state). ``system`` messages become ``instructions``.

Options: ``api`` (``responses`` | ``chat``), ``max_output_tokens`` (``max_tokens`` in
Chat Completions, which compatible servers understand), ``temperature``, ``top_p``,
``reasoning_effort``. Reasoning is reported as a character count only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from hypha_celery.backends.error import BackendError
from hypha_celery.backends.event import BackendEvent
from hypha_celery.backends.llm import cancel, errors, ref
from hypha_celery.backends.llm.sdk import ClientCache
from hypha_celery.backends.llm.sse import open_raw
from hypha_celery.backends.llm.stream import LLMStream
from hypha_celery.backends.llm.types import LLMRequest, LLMResult, Message, ToolCall, Usage
from hypha_celery.backends.llm.wire import (
    ToolNames,
    check_options,
    dumps,
    parse_arguments,
    text,
)

__all__ = ["OPTIONS", "VENDOR", "open_stream"]

VENDOR = "openai"
OPTIONS = ref.OPTIONS[VENDOR]
_APIS = ("responses", "chat")


def _build(key: str, base_url: str | None, timeout: float) -> openai.OpenAI:
    http = openai.DefaultHttpxClient(transport=cancel.transport())
    return cancel.closing(openai.OpenAI(api_key=key, base_url=base_url, timeout=timeout,
                                        max_retries=0, http_client=http), http)


_clients = ClientCache(_build)


def open_stream(request: LLMRequest, *, key: str, base_url: str | None,
                timeout: float) -> LLMStream:
    """Send ``request`` and return its stream once the response headers arrived. Raises
    ``BackendError``: ``invalid_request`` for a request this module refuses (nothing is
    sent), else the kind of the HTTP or connection failure."""
    names, api, body = _translate(request)
    error: BackendError | None = None
    try:
        client = _clients.get(key, base_url, timeout)
        if api == "chat":
            create: Any = client.chat.completions.with_streaming_response.create
            body["stream_options"] = {"include_usage": True}
        else:
            create = client.responses.with_streaming_response.create
        sdk = open_raw(VENDOR, create(**_sdk_args(api, body)))
    except errors.PASSTHROUGH:
        raise
    except Exception as exc:
        error = errors.from_exception(VENDOR, exc, key=key)
    if error is not None:
        raise error  # outside the handler: the SDK exception may quote an echoed key
    decoder = _Chat(names, request.model) if api == "chat" else _Responses(names, request.model)
    return LLMStream(VENDOR, sdk, decoder, key=key)


def _sdk_args(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """The SDK's arguments for ``body``: the body itself goes as ``extra_body`` (merged
    last, over the typed arguments). The SDK walks typed arguments against its
    TypedDicts before sending (about 0.2 ms per history message, 4 ms for 20; 75 us for
    ``model`` alone, whose type is a union with a literal of every model name, hashed at
    each step), which changes nothing in the plain JSON built here. Chat Completions
    requires ``model`` and ``messages`` among the typed arguments: the model, and an empty
    list replaced by the body's; the Responses API requires neither."""
    args: dict[str, Any] = {"stream": True, "extra_body": body}
    if api == "chat":
        args["model"] = body["model"]
        args["messages"] = []
    return args


def _translate(request: LLMRequest) -> tuple[ToolNames, str, dict[str, Any]]:
    try:
        names, api = _check(request)
        body = _chat_body(request, names) if api == "chat" else _responses_body(request, names)
    except (ValueError, KeyError, TypeError) as exc:
        raise BackendError(VENDOR, "invalid_request", False,
                           message=f"{type(exc).__name__}: {exc}") from None
    return names, api, body


def _check(request: LLMRequest) -> tuple[ToolNames, str]:
    check_options(request.options, OPTIONS)
    api = request.options.get("api", "responses")
    if api not in _APIS:
        raise ValueError(f"api must be one of {_APIS}, not {api!r}")
    return ToolNames(request.tools), api


# -- Responses API ---------------------------------------------------------------------
def _responses_body(request: LLMRequest, names: ToolNames) -> dict[str, Any]:
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in request.messages:
        role = message.get("role")
        if role == "system":
            instructions.append(text(message))
        elif role == "user":
            items.append({"role": "user", "content": text(message)})
        elif role == "assistant":
            items.extend(_responses_assistant(message, names))
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                          "output": text(message)})
        else:
            raise ValueError(f"unknown message role {role!r}")
    body: dict[str, Any] = {"model": request.model, "input": items, "store": False}
    if instructions:
        body["instructions"] = "\n\n".join(instructions)
    if request.tools:
        body["tools"] = [{"type": "function", "name": names.wire(t.name),
                          "description": t.description, "parameters": t.parameters,
                          "strict": False} for t in request.tools]
    opts = request.options
    for name in ("max_output_tokens", "temperature", "top_p"):
        if name in opts:
            body[name] = opts[name]
    if "reasoning_effort" in opts:
        body["reasoning"] = {"effort": opts["reasoning_effort"]}
    return body


def _responses_assistant(message: Message, names: ToolNames) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if text(message):
        items.append({"role": "assistant", "content": text(message)})
    for call in message.get("tool_calls") or ():
        items.append({"type": "function_call", "call_id": call["id"],
                      "name": names.wire(call["name"]),
                      "arguments": dumps(call.get("arguments") or {})})
    return items


class _Responses:
    """Decodes ``response.*`` events (see the provider reference, section 1)."""

    def __init__(self, names: ToolNames, model: str) -> None:
        self._names = names
        self._model = model
        self._id: str | None = None
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}  # output_index -> call being streamed
        self._done: list[ToolCall] = []
        self._reasoning: dict[int, int] = {}  # output_index -> characters
        self._final: Any = None

    def feed(self, raw: Any) -> list[BackendEvent]:
        kind = getattr(raw, "type", "")
        if kind == "response.output_text.delta":  # the hot path
            return self._text_delta(raw)
        handler = _RESPONSES.get(kind)
        return handler(self, raw) if handler is not None else []

    def _created(self, raw: Any) -> list[BackendEvent]:
        self._id = getattr(raw.response, "id", None)
        self._model = getattr(raw.response, "model", None) or self._model
        return []

    def _text_delta(self, raw: Any) -> list[BackendEvent]:
        delta = raw.delta or ""
        self._text.append(delta)
        return [BackendEvent.text(delta)] if delta else []

    def _item_added(self, raw: Any) -> list[BackendEvent]:
        item = raw.item
        if item.type == "function_call":
            self._calls[raw.output_index] = {"id": item.call_id, "name": item.name,
                                             "args": [item.arguments or ""]}
        elif item.type == "reasoning":
            self._reasoning[raw.output_index] = 0
        return []

    def _args_delta(self, raw: Any) -> list[BackendEvent]:
        call = self._calls.get(raw.output_index)
        if call is not None:
            call["args"].append(raw.delta or "")
        return []

    def _reasoning_delta(self, raw: Any) -> list[BackendEvent]:
        index = raw.output_index
        self._reasoning[index] = self._reasoning.get(index, 0) + len(raw.delta or "")
        return []

    def _item_done(self, raw: Any) -> list[BackendEvent]:
        item = raw.item
        if item.type == "function_call":
            call = self._calls.pop(raw.output_index, None)
            streamed = "".join(call["args"]) if call is not None else ""
            return [self._tool_use(item.call_id, item.name, item.arguments or streamed)]
        if item.type == "reasoning":
            chars = self._reasoning.pop(raw.output_index, 0) or _summary_chars(item)
            return [BackendEvent.new("reasoning", {"chars": chars})]
        return []

    def _tool_use(self, call_id: str, wire: str, arguments: str) -> BackendEvent:
        call = ToolCall(call_id, self._names.name(wire), parse_arguments(arguments))
        self._done.append(call)
        return BackendEvent.new("tool_use", {"id": call.id, "name": call.name,
                                             "input": call.arguments})

    def _terminal(self, raw: Any) -> list[BackendEvent]:
        self._final = raw.response
        return []

    def _failed(self, raw: Any) -> list[BackendEvent]:
        error = getattr(raw.response, "error", None)
        payload = {"code": getattr(error, "code", None), "type": getattr(error, "type", None)}
        raise errors.from_payload(VENDOR, payload,
                                  errors.scrub(f"response.failed: {getattr(error, 'message', '')}"))

    def _error(self, raw: Any) -> list[BackendEvent]:
        payload = {"code": getattr(raw, "code", None), "type": getattr(raw, "type", None)}
        raise errors.from_payload(VENDOR, payload,
                                  errors.scrub(f"error event: {getattr(raw, 'message', '')}"))

    def finish(self) -> tuple[list[BackendEvent], LLMResult]:
        final = self._final
        if final is None:
            raise errors.incomplete_stream(VENDOR, "no response.completed event")
        events = [self._tool_use(i.call_id, i.name, i.arguments or "")
                  for i in getattr(final, "output", None) or ()
                  if i.type == "function_call" and i.call_id not in {c.id for c in self._done}]
        usage = _responses_usage(getattr(final, "usage", None))
        events.append(BackendEvent.new("usage", usage.to_json()))
        details = getattr(final, "incomplete_details", None)
        stop = getattr(details, "reason", None) or getattr(final, "status", None) or "completed"
        return events, LLMResult("".join(self._text), tuple(self._done), usage, stop,
                                 self._model, self._id)


_RESPONSES: dict[str, Callable[[_Responses, Any], list[BackendEvent]]] = {
    "response.created": _Responses._created,
    "response.output_text.delta": _Responses._text_delta,
    "response.refusal.delta": _Responses._text_delta,
    "response.output_item.added": _Responses._item_added,
    "response.function_call_arguments.delta": _Responses._args_delta,
    "response.reasoning_summary_text.delta": _Responses._reasoning_delta,
    "response.reasoning_text.delta": _Responses._reasoning_delta,
    "response.output_item.done": _Responses._item_done,
    "response.completed": _Responses._terminal,
    "response.incomplete": _Responses._terminal,
    "response.failed": _Responses._failed,
    "error": _Responses._error,
}


def _summary_chars(item: Any) -> int:
    parts = getattr(item, "summary", None) or ()
    return sum(len(getattr(part, "text", "") or "") for part in parts)


def _responses_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "input_tokens_details", None)
    return Usage(_int(usage, "input_tokens"), _int(usage, "output_tokens"),
                 _int(details, "cached_tokens"), _int(details, "cache_write_tokens"))


# -- Chat Completions ------------------------------------------------------------------
def _chat_body(request: LLMRequest, names: ToolNames) -> dict[str, Any]:
    messages = [_chat_message(m, names) for m in request.messages]
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [{"type": "function", "function": {
            "name": names.wire(t.name), "description": t.description,
            "parameters": t.parameters}} for t in request.tools]
    opts = request.options
    if "max_output_tokens" in opts:
        body["max_tokens"] = opts["max_output_tokens"]
    for name in ("temperature", "top_p", "reasoning_effort"):
        if name in opts:
            body[name] = opts[name]
    return body


def _chat_message(message: Message, names: ToolNames) -> dict[str, Any]:
    role = message.get("role")
    if role in ("system", "user"):
        return {"role": role, "content": text(message)}
    if role == "tool":
        return {"role": "tool", "tool_call_id": message["tool_call_id"],
                "content": text(message)}
    if role != "assistant":
        raise ValueError(f"unknown message role {role!r}")
    calls = [{"id": c["id"], "type": "function",
              "function": {"name": names.wire(c["name"]),
                           "arguments": dumps(c.get("arguments") or {})}}
             for c in message.get("tool_calls") or ()]
    # content may be null only beside tool calls
    out: dict[str, Any] = {"role": "assistant", "content": text(message) or (None if calls else "")}
    if calls:
        out["tool_calls"] = calls
    return out


class _Chat:
    """Decodes ``chat.completion.chunk`` s (see the provider reference, section 2)."""

    def __init__(self, names: ToolNames, model: str) -> None:
        self._names = names
        self._model = model
        self._id: str | None = None
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}  # index -> {"id", "name", "args"}
        self._reasoning = 0
        self._stop: str | None = None
        self._usage: Any = None

    def feed(self, raw: Any) -> list[BackendEvent]:
        self._id = self._id or getattr(raw, "id", None)
        self._model = getattr(raw, "model", None) or self._model
        if getattr(raw, "usage", None) is not None:
            self._usage = raw.usage
        events: list[BackendEvent] = []
        for choice in getattr(raw, "choices", None) or ():
            if choice.index != 0:
                continue
            events.extend(self._delta(choice.delta))
            self._stop = choice.finish_reason or self._stop
        return events

    def _delta(self, delta: Any) -> list[BackendEvent]:
        if delta is None:
            return []
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thought, str):
            self._reasoning += len(thought)
        for fragment in getattr(delta, "tool_calls", None) or ():
            call = self._calls.setdefault(fragment.index, {"id": "", "name": "", "args": []})
            call["id"] = call["id"] or fragment.id or ""
            function = fragment.function
            if function is not None:
                call["name"] = call["name"] or function.name or ""
                call["args"].append(function.arguments or "")
        piece = (getattr(delta, "content", None) or "") + (getattr(delta, "refusal", None) or "")
        if not piece:
            return []
        self._text.append(piece)
        return [BackendEvent.text(piece)]

    def finish(self) -> tuple[list[BackendEvent], LLMResult]:
        if self._stop is None:
            raise errors.incomplete_stream(VENDOR, "no chunk with a finish_reason")
        calls = tuple(ToolCall(c["id"], self._names.name(c["name"]),
                               parse_arguments("".join(c["args"])))
                      for _, c in sorted(self._calls.items()))
        events = [BackendEvent.new("tool_use", {"id": c.id, "name": c.name, "input": c.arguments})
                  for c in calls]
        if self._reasoning:
            events.insert(0, BackendEvent.new("reasoning", {"chars": self._reasoning}))
        usage = _chat_usage(self._usage)
        events.append(BackendEvent.new("usage", usage.to_json()))
        return events, LLMResult("".join(self._text), calls, usage, self._stop, self._model,
                                 self._id)


def _chat_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    return Usage(_int(usage, "prompt_tokens"), _int(usage, "completion_tokens"),
                 _int(details, "cached_tokens"), _int(details, "cache_write_tokens"))


def _int(obj: Any, name: str) -> int:
    value = getattr(obj, name, None) if obj is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
