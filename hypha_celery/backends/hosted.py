"""``HostedBackend``: an agent backend on a model behind an HTTP API (the base of
:class:`~hypha_celery.backends.openai.OpenAIBackend` and
:class:`~hypha_celery.backends.anthropic.AnthropicBackend`).

Start options (``init_agent``'s backend options; anything else is refused):

==========================  =========================================================
``model`` (required)        the provider's model name, or a ``provider:model`` reference
                            of this backend's vendor (``openai-chat:...`` selects Chat
                            Completions)
``base_url``                another endpoint (an OpenAI-compatible server, a proxy)
``key_env``                 the environment variable holding the key (default
                            ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``, or a callback:
                            :mod:`hypha_celery.backends.llm.keys`)
``system``                  the system prompt
``tools``                   function tools: ``ToolSpec`` s, ``ToolDecl`` s or their JSON
                            (:class:`~hypha_celery.backends.llm.types.ToolDecl`); None: none
``max_output_tokens``       per turn
``temperature``, ``top_p``  sampling
``timeout``                 seconds without a byte before a turn fails (default 600)
``max_messages``            history bound, default 200 messages
``max_bytes``               history bound, default 1 MiB of message JSON
==========================  =========================================================

A missing key, an unknown option, a bad model or a tool schema the APIs refuse fail the
start with a :class:`BackendError` (the agent does not start). The key is resolved again
for each turn and is never stored.

The conversation is the session: ``{"opts": {...}, "messages": [...]}`` in the neutral
format of :mod:`hypha_celery.backends.llm.types`, stored by the runtime between turns, so
any worker serves the next turn. ``prompt`` appends the user message and sends the whole
history; ``update_session`` appends the answer. A failed turn leaves no trace: messages
after the last answer are dropped when the next prompt is sent.

**History bound.** Before each dispatch the history must fit ``max_messages`` and
``max_bytes``. Past it, a subclass's ``compact(messages) -> messages`` hook (a class
attribute; none by default) may shorten it; if there is none, or it does not get under
the bound, ``prompt`` raises ``BackendError(kind="history_overflow")`` and nothing is sent.

**Tool calls.** A turn whose answer calls tools ends with ``result.tool_calls``. The
next prompt answers them: ``prompt(session, HostedBackend.tool_results({call_id:
output}))``. A plain-text prompt instead answers every pending call with
``"(no result)"`` and then says the text. Started with ``run_tools=True`` and bound with
a tool executor (:mod:`hypha_celery.backends.tools`; an agent given governed tools is),
the backend answers them itself within the turn: each call goes through the executor
(``tool_result`` events: id, tool, status), the answers go back to the model, and so on
until an answer calls no tool or ``max_tool_rounds`` (default 8, at most 32) pass (then
the turn ends ``error`` ``tool_rounds_exhausted``); the session keeps every round.

**Events** of a turn: ``text`` deltas, ``tool_use``, ``reasoning`` (a character count),
``usage``, then ``result`` ``{"text", "usage", "model", "stop_reason", "tool_calls"}`` or
``error`` ``{"reason": kind, "backend_error": {...}}`` (see
:mod:`hypha_celery.backends.llm.errors` for the kinds). :meth:`cancel` closes the HTTP
stream from any thread; a request still waiting for its response headers is abandoned
when they arrive.

**Rate limits.** :meth:`bind` gives the backend the runtime's
:class:`~hypha_celery.backends.llm.client.BackendServices`: each turn takes room from the
shared limiter before it opens its stream (a concurrency slot, held until the stream is
closed, then rate room; waiting up to its bound, else the turn fails ``rate_limited``),
and a 429 with ``retry-after`` pauses the key for every worker.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import replace
from typing import Any, ClassVar, cast
from urllib.parse import urlsplit

from hypha_celery.backends.base import Backend, Checkpoint, Session
from hypha_celery.backends.error import BackendError
from hypha_celery.backends.event import BackendEvent
from hypha_celery.backends.llm import errors
from hypha_celery.backends.llm.cancel import CancelToken
from hypha_celery.backends.llm.client import BackendServices
from hypha_celery.backends.llm.keys import check_env_name, resolve_key
from hypha_celery.backends.llm.ratelimit import Slot
from hypha_celery.backends.llm.ref import PROVIDERS, ModelRef, Provider, provider
from hypha_celery.backends.llm.stream import LLMStream
from hypha_celery.backends.llm.types import (
    LLMRequest,
    LLMResult,
    Message,
    ToolDecl,
    tool_decls,
)
from hypha_celery.backends.llm.wire import ToolNames
from hypha_celery.backends.tools import DEFAULT_TOOL_ROUNDS, MAX_TOOL_ROUNDS, ToolRequest
from hypha_celery.errors import ExtraNotInstalled, InvalidModelRef
from hypha_celery.jsontypes import JsonValue

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_MESSAGES", "DEFAULT_TIMEOUT", "HostedBackend"]

DEFAULT_MAX_MESSAGES = 200
DEFAULT_MAX_BYTES = 1_048_576
DEFAULT_TIMEOUT = 600.0
NO_RESULT = "(no result)"
_TOOL_RESULTS = "hypha_tool_results"
_COMMON = frozenset({"model", "base_url", "key_env", "system", "tools", "max_output_tokens",
                     "temperature", "top_p", "timeout", "max_messages", "max_bytes",
                     "run_tools", "max_tool_rounds"})
#: start options that are request options of the provider module
_REQUEST_OPTIONS = ("api", "max_output_tokens", "temperature", "top_p", "reasoning_effort",
                    "thinking_budget")
Compact = Callable[[list[Message]], list[Message]]


class HostedBackend(Backend):
    """See the module docstring. Subclasses set ``provider`` (the vendor) and
    ``extra_options``."""

    provider: ClassVar[str] = "hosted"
    #: Start options this vendor adds to the common ones.
    extra_options: ClassVar[frozenset[str]] = frozenset()
    #: ``compact(messages) -> messages``, applied when the history passes its bound.
    compact: ClassVar[Compact | None] = None
    #: The provider keeps nothing: the dispatched session is the stored history plus the
    #: prompt (and a compaction, redone if a worker dies mid-stream).
    durable_dispatch: ClassVar[bool] = False
    cancel_unblocks: ClassVar[bool] = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turn: _Turn | None = None
        self._services = BackendServices()

    def bind(self, services: BackendServices) -> None:
        self._services = services

    # -- the Backend contract ------------------------------------------------------------
    def start_session(self, opts: dict[str, Any]) -> Session:
        clean = self.check_options(opts)
        self._module()
        resolve_key(self.provider, clean.get("key_env"))
        return {"opts": clean, "messages": []}

    def prompt(self, session: Session, prompt: str,
               checkpoint: Checkpoint | None = None) -> tuple[Iterator[BackendEvent], Session]:
        opts, history = self._read(session)
        if not isinstance(prompt, str):
            raise self._error("invalid_request", "a prompt is text")
        messages = self._bounded(_next_messages(history, prompt), opts)
        key = resolve_key(self.provider, opts.get("key_env"))
        request = LLMRequest(opts["model"], tuple(_system(opts) + messages),
                             tuple(ToolDecl(**t) for t in opts.get("tools", ())),
                             {k: opts[k] for k in _REQUEST_OPTIONS if k in opts})
        turn = _Turn(self._module(), request, key, opts.get("base_url"),
                     float(opts.get("timeout", DEFAULT_TIMEOUT)), self._services)
        if opts.get("run_tools"):
            turn.rounds = int(opts.get("max_tool_rounds", DEFAULT_TOOL_ROUNDS))
        with self._lock:
            self._turn = turn
        return turn.events(), {"opts": opts, "messages": _json(messages)}

    def update_session(self, session: Session, result_data: dict[str, Any]) -> Session:
        opts, history = self._read(session)
        answer: Message = {"role": "assistant", "content": result_data.get("text") or ""}
        calls = result_data.get("tool_calls")
        if calls:
            answer["tool_calls"] = calls
        rounds = cast(list[Message], result_data.get("tool_rounds") or [])
        return {"opts": opts, "messages": _json([*history, *rounds, answer])}

    def reset_session(self, session: Session) -> Session:
        opts, _ = self._read(session)
        return {"opts": opts, "messages": []}

    def terminate_session(self, session: Session) -> None:
        """Nothing to release: the provider keeps no session."""

    def cancel(self) -> None:
        with self._lock:
            turn = self._turn
        if turn is not None:
            turn.cancel()

    @staticmethod
    def tool_results(results: dict[str, Any]) -> str:
        """The prompt answering pending tool calls: ``{call_id: output}`` (an output that
        is not text is sent as JSON)."""
        return json.dumps({_TOOL_RESULTS: {str(k): v if isinstance(v, str) else json.dumps(v)
                                           for k, v in results.items()}})

    # -- options -------------------------------------------------------------------------
    def check_options(self, opts: dict[str, Any]) -> dict[str, Any]:
        """The start options, validated and as stored in the session (JSON, no key)."""
        if not isinstance(opts, dict):
            raise self._error("invalid_option", "backend options are a dict")
        unknown = sorted(set(opts) - _COMMON - self.extra_options)
        if unknown:
            raise self._error("invalid_option", f"unknown backend option {unknown[0]!r}")
        clean: dict[str, Any] = {k: v for k, v in opts.items() if v is not None}
        clean.update(self._model(opts.get("model")))
        try:
            _check_values(clean)
            check_env_name(clean.get("key_env"))
        except (TypeError, ValueError) as exc:
            raise self._error("invalid_option", str(exc)) from None
        clean["tools"] = self._tools(opts.get("tools"))
        if not clean["tools"]:
            del clean["tools"]
        return clean

    def _model(self, model: Any) -> dict[str, Any]:
        if not isinstance(model, str) or not model.strip():
            raise self._error("invalid_model", "the model option names a model")
        prefix, sep, _ = model.partition(":")
        if not sep or prefix not in PROVIDERS:
            return {"model": model}
        try:
            ref = ModelRef.parse(model)
        except InvalidModelRef as exc:
            raise self._error("invalid_model", str(exc)) from None
        if ref.vendor != self.provider:
            raise self._error("invalid_model", f"{ref.provider!r} models need another "
                              f"backend than {type(self).__name__}")
        return {"model": ref.model, **ref.options}

    def _tools(self, tools: Any) -> list[dict[str, Any]]:
        try:
            decls = tool_decls(tools)
            ToolNames(decls)
        except (TypeError, ValueError, KeyError) as exc:
            raise self._error("invalid_tool", f"{type(exc).__name__}: {exc}") from None
        return [d.to_json() for d in decls]

    # -- helpers -------------------------------------------------------------------------
    def _module(self) -> Provider:
        try:
            return provider(self.provider)
        except ExtraNotInstalled as exc:
            raise self._error("sdk_not_installed", str(exc)) from None

    def _read(self, session: Any) -> tuple[dict[str, Any], list[Message]]:
        if (not isinstance(session, dict) or not isinstance(session.get("opts"), dict)
                or not isinstance(session.get("messages"), list)):
            raise self._error("invalid_session", f"not a {type(self).__name__} session")
        return session["opts"], session["messages"]

    def _bounded(self, messages: list[Message], opts: dict[str, Any]) -> list[Message]:
        limit = (int(opts.get("max_messages", DEFAULT_MAX_MESSAGES)),
                 int(opts.get("max_bytes", DEFAULT_MAX_BYTES)))
        if _fits(messages, limit):
            return messages
        hook = type(self).compact
        if hook is not None:
            messages = list(hook(list(messages)))
            if _fits(messages, limit):
                return messages
        raise self._error("history_overflow", f"the history passed its bound of {limit[0]} "
                          f"messages / {limit[1]} bytes")

    def _error(self, kind: str, message: str) -> BackendError:
        return BackendError(self.provider, kind, False, message=message)


class _Turn:
    """One dispatched prompt: opens the stream when first iterated; cancel from anywhere."""

    def __init__(self, module: Provider, request: LLMRequest, key: str, base_url: str | None,
                 timeout: float, services: BackendServices) -> None:
        self._module = module
        self._services = services
        self._request = request
        self._key: str | None = key
        self._turn_key: str | None = key
        self._base_url = base_url
        self._timeout = timeout
        self._lock = threading.Lock()
        self._stream: LLMStream | None = None
        #: Cancelled with the turn; reaches its network I/O while it is blocked (see
        #: ``llm.cancel``).
        self._token = CancelToken()
        #: Tool rounds this turn may run itself (0: the application answers tool calls).
        self.rounds = 0

    def events(self) -> Iterator[BackendEvent]:
        """The stream's events, then ``result`` or ``error``. The stream is closed and its
        concurrency slot released before that last event (a reader may stop at it), or
        when the reader closes the iterator early. With tool rounds, each answer that
        calls tools is answered through the executor and the model asked again."""
        rounds: list[Message] = []
        try:
            for done in itertools.count():
                result = yield from self._call()
                if not (result.tool_calls and self.rounds and self._services.tools):
                    break
                if done >= self.rounds:
                    raise self._exhausted()
                yield from self._answer(result, rounds)
        except BackendError as exc:
            yield BackendEvent.new("error", {"reason": exc.kind, "backend_error": exc.to_json()})
            return
        yield BackendEvent.new("result", {
            "text": result.text, "usage": result.usage.to_json(), "model": result.model,
            "stop_reason": result.stop_reason,
            "tool_calls": [c.to_json() for c in result.tool_calls],
            **({"tool_rounds": _json(rounds)} if rounds else {})})

    def _call(self) -> Generator[BackendEvent, None, LLMResult]:
        """One model call: its events; returns its result."""
        slot, stream = self._open()
        with slot, stream:
            events = iter(stream)
            while True:
                with self._token.held():  # a cancel reaches a read waiting for a chunk
                    event = next(events, None)
                if event is None:
                    break
                yield event
        result = stream.result
        if result is None:  # the stream returned without its terminal event
            raise errors.incomplete_stream(self._module.VENDOR)
        return result

    def _answer(self, result: LLMResult, rounds: list[Message]) -> Iterator[BackendEvent]:
        """Run ``result``'s tool calls through the executor; the assistant message and
        one tool message per call join ``rounds`` and the next request."""
        executor = self._services.tools
        assert executor is not None
        answers = [executor.execute(ToolRequest(c.id, c.name, c.arguments))
                   for c in result.tool_calls]
        for a, c in zip(answers, result.tool_calls, strict=True):
            yield BackendEvent.new("tool_result", {"id": a.call_id, "name": c.name,
                                                   "status": a.status})
        said: list[Message] = [{"role": "assistant", "content": result.text or "",
                                "tool_calls": [c.to_json() for c in result.tool_calls]}]
        said += [{"role": "tool", "tool_call_id": a.call_id, "content": _text(a.content())}
                 for a in answers]
        rounds += said
        self._request = replace(self._request, messages=(*self._request.messages, *said))
        with self._lock:
            self._key = self._turn_key  # the next round's call

    def _exhausted(self) -> BackendError:
        return BackendError(self._module.VENDOR, "tool_rounds_exhausted", False,
                            message=f"the model still called tools after {self.rounds} "
                                    "rounds (max_tool_rounds)")

    def _open(self) -> tuple[Slot, LLMStream]:
        """The stream, and the concurrency slot it holds until it is closed."""
        vendor = self._module.VENDOR
        with self._lock:
            key, self._key = self._key, None
            if self._token.cancelled or key is None:
                raise errors.cancelled(vendor)
        with self._token.held():  # a cancel ends a wait for the rate limit or the response
            slot, _ = self._services.admit(vendor, key, self._request)
            try:
                stream = self._module.open_stream(self._request, key=key,
                                                  base_url=self._base_url,
                                                  timeout=self._timeout)
            except BaseException as exc:
                slot.release()
                if isinstance(exc, BackendError):
                    self._services.report(vendor, key, exc)
                raise
        with self._lock:
            if not self._token.cancelled:
                self._stream = stream
                return slot, stream
        stream.close()
        slot.release()
        raise errors.cancelled(vendor)

    def cancel(self) -> None:
        with self._lock:  # _open either sees the cancel or hands over its stream
            self._token.cancel()
            self._key = self._turn_key = None
            stream = self._stream
        if stream is not None:
            stream.close()


def _json(messages: list[Message]) -> list[JsonValue]:
    """A session's history as the JSON it is (each message a JSON object, as written)."""
    return cast(list[JsonValue], messages)


def _next_messages(history: list[Message], prompt: str) -> list[Message]:
    """The history up to its last answer, then what ``prompt`` says."""
    last = max((i for i, m in enumerate(history) if m.get("role") == "assistant"), default=-1)
    messages = list(history[:last + 1])
    pending = messages[-1].get("tool_calls") or [] if messages else []
    if not pending:
        return [*messages, {"role": "user", "content": prompt}]
    results = _tool_results(prompt)
    for call in pending:
        output = NO_RESULT if results is None else results.get(call["id"], NO_RESULT)
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    if results is None:
        messages.append({"role": "user", "content": prompt})
    return messages


def _tool_results(prompt: str) -> dict[str, str] | None:
    if _TOOL_RESULTS not in prompt:
        return None
    try:
        doc = json.loads(prompt)
    except ValueError:
        return None
    results = doc.get(_TOOL_RESULTS) if isinstance(doc, dict) and len(doc) == 1 else None
    if not isinstance(results, dict):
        return None
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in results.items()}


def _text(content: JsonValue) -> str:
    """A tool message's content: text as it is, anything else as JSON."""
    return content if isinstance(content, str) else json.dumps(content)


def _system(opts: dict[str, Any]) -> list[Message]:
    system = opts.get("system")
    return [{"role": "system", "content": system}] if system else []


def _fits(messages: list[Message], limit: tuple[int, int]) -> bool:
    if len(messages) > limit[0]:
        return False
    return len(json.dumps(messages, separators=(",", ":")).encode()) <= limit[1]


_POSITIVE_INT = ("max_output_tokens", "max_messages", "max_bytes", "thinking_budget")
_NUMBERS = ("temperature", "top_p", "timeout")
_TEXT = ("base_url", "system", "reasoning_effort", "api")


def _check_tool_rounds(opts: Mapping[str, object]) -> None:
    if not isinstance(opts.get("run_tools", False), bool):
        raise ValueError("run_tools must be true or false")
    rounds = opts.get("max_tool_rounds", DEFAULT_TOOL_ROUNDS)
    if isinstance(rounds, bool) or not isinstance(rounds, int) \
            or not 1 <= rounds <= MAX_TOOL_ROUNDS:
        raise ValueError(f"max_tool_rounds must be an integer from 1 to {MAX_TOOL_ROUNDS}")


def _check_values(opts: dict[str, Any]) -> None:
    for name in _POSITIVE_INT:
        value = opts.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value <= 0):
            raise ValueError(f"{name} must be a positive integer")
    for name in _NUMBERS:
        value = opts.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or value < 0):
            raise ValueError(f"{name} must be a non-negative number")
    for name in _TEXT:
        if name in opts and not isinstance(opts[name], str):
            raise ValueError(f"{name} must be a string")
    _check_tool_rounds(opts)
    if opts.get("api", "responses") not in ("responses", "chat"):
        raise ValueError("api must be 'responses' or 'chat'")
    if opts.get("timeout") == 0:
        raise ValueError("timeout must be positive")
    base_url = opts.get("base_url")
    if base_url is not None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("base_url must be an http(s) URL")
        if parts.username or parts.password:  # the session is stored: no secrets in it
            raise ValueError("base_url must not hold credentials (use key_env)")
