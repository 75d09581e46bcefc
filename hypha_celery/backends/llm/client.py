"""``LLMClient``: one model call over the provider modules, with everything around it.

``client.call("openai:gpt-4.1-mini", messages, tools, **options)`` resolves the
reference and the key (environment or callback, :mod:`.keys`), takes room from the rate
limiter (:mod:`.ratelimit`: a concurrency slot when the key has a concurrency limit,
held until the stream is closed, then rate room; the key appears there only as a hash),
streams the answer (text deltas go to a live topic when one is given), and returns an
:class:`LLMCall`: the :class:`~hypha_celery.backends.llm.types.LLMResult`, the time
waited for the limiter, the latency and the cost (:mod:`.pricing`; None when the model
has no price).
Failures are :class:`~hypha_celery.backends.BackendError` kinds (:mod:`.errors`); a 429
with ``retry-after`` pauses the key for every worker sharing the limiter.

:class:`BackendServices` is what an agent backend gets through ``Backend.bind`` (the
limiter and its wait bound), so agent turns and graph nodes share one budget per key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from hypha_celery.backends.error import BackendError
from hypha_celery.backends.llm import errors
from hypha_celery.backends.llm.keys import resolve_key
from hypha_celery.backends.llm.pricing import PriceTable
from hypha_celery.backends.llm.ratelimit import FREE, NO_LIMITS, Limiter, Slot, limit_key
from hypha_celery.backends.llm.ref import PROVIDERS, ModelRef, provider
from hypha_celery.backends.llm.types import (
    LLMRequest,
    LLMResult,
    Message,
    ToolDecl,
    tool_decls,
)
from hypha_celery.backends.llm.wire import ToolNames
from hypha_celery.backends.tools import ToolExecutor
from hypha_celery.errors import InvalidModelRef
from hypha_celery.live import LiveBus, LiveItem

__all__ = ["DEFAULT_MAX_WAIT", "DEFAULT_TIMEOUT", "BackendServices", "LLMCall", "LLMClient",
           "LiveSink", "check_base_urls", "estimate_tokens"]

#: Seconds a call may wait for rate-limit room before it fails ``rate_limited``.
DEFAULT_MAX_WAIT = 60.0
#: Seconds without a byte before a call fails ``transport``.
DEFAULT_TIMEOUT = 600.0
_CHARS_PER_TOKEN = 4


def estimate_tokens(request: LLMRequest) -> int:
    """Tokens a request may use, for the tokens-per-minute bucket: its text at about four
    characters a token, plus ``max_output_tokens`` when set (the usual estimate; the
    provider counts the real ones)."""
    chars = sum(len(str(m.get("content") or "")) for m in request.messages)
    chars += sum(len(t.description) + len(str(t.parameters)) for t in request.tools)
    out = request.options.get("max_output_tokens")
    return chars // _CHARS_PER_TOKEN + (out if isinstance(out, int) else 0)


@dataclass(frozen=True, slots=True)
class BackendServices:
    """What the runtime hands a backend (``Backend.bind``): the shared rate limiter and
    how long a call may wait for it, and the tools a turn may run
    (:class:`~hypha_celery.backends.tools.ToolExecutor`; None: the application answers
    tool calls)."""

    limiter: Limiter = NO_LIMITS
    max_wait: float = DEFAULT_MAX_WAIT
    tools: ToolExecutor | None = None

    def admit(self, vendor: str, key: str, request: LLMRequest) -> tuple[Slot, float]:
        """Wait for a concurrency slot, then for rate room, for ``request`` on ``key``
        (within ``max_wait`` in all): the slot, to release once the call's stream is
        closed, and the seconds waited. Raises ``BackendError(kind="rate_limited")``
        past ``max_wait`` (holding nothing)."""
        if self.limiter is NO_LIMITS:
            return FREE, 0.0
        limited = limit_key(vendor, key)
        began = time.monotonic()
        slot = self.limiter.hold(limited, self.max_wait)
        try:
            left = max(0.0, self.max_wait - (time.monotonic() - began))
            waited = self.limiter.acquire(limited, estimate_tokens(request), left)
        except BaseException:
            slot.release()
            raise
        return slot, slot.waited + waited

    def report(self, vendor: str, key: str, error: BackendError) -> None:
        """A provider said 429 with ``retry-after``: pause ``key`` for every worker."""
        if error.kind == "rate_limited" and error.status == 429 and error.retry_after:
            try:
                seconds = float(error.retry_after)
            except (TypeError, ValueError):
                return
            self.limiter.pause(limit_key(vendor, key), seconds)


#: ``watch(cancel)``: a context manager during which ``cancel`` may be called from
#: another thread.
Watch = Callable[[Callable[[], None]], AbstractContextManager[None]]


@dataclass(frozen=True, slots=True)
class LiveSink:
    """Where a call's stream goes while it runs: ``bus.publish(topic, {kind, ...fields})``
    (text deltas, tool-use notices without their input, usage, reasoning counts)."""

    bus: LiveBus
    topic: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LLMCall:
    """A completed call and its measures (milliseconds; ``cost_usd`` None: unpriced)."""

    ref: ModelRef
    result: LLMResult
    latency_ms: float
    wait_ms: float
    cost_usd: float | None
    #: Characters of the provider's thinking its stream reported (``reasoning`` events:
    #: a count, the text is never kept); 0: none reported.
    reasoning_chars: int = 0

    @property
    def vendor(self) -> str:
        return PROVIDERS[self.ref.provider].vendor

    def measures(self) -> dict[str, Any]:
        """What events record about the call (no content): provider, usage, times, cost."""
        out: dict[str, Any] = {"provider": self.ref.provider,
                               "usage": self.result.usage.to_json(),
                               "latency_ms": round(self.latency_ms, 3),
                               "wait_ms": round(self.wait_ms, 3)}
        if self.cost_usd is not None:
            out["cost_usd"] = self.cost_usd
        return out


#: Text deltas within this many seconds of the last publish join one live item.
COALESCE_S = 0.002


class LLMClient:
    """Model calls over the provider modules (see the module docstring).

    ``limiter``: shared rate limits (default none); ``prices``: a :class:`PriceTable`
    or its mapping; ``base_urls``: per provider (``openai-chat``) or vendor (``openai``),
    an OpenAI-compatible server or a proxy; ``max_wait``: seconds a call may wait for the
    limiter; ``timeout``: seconds without a byte. Thread-safe: one client serves every
    thread of a worker.
    """

    def __init__(self, *, limiter: Limiter | None = None,
                 prices: PriceTable | Mapping[str, Any] | None = None,
                 base_urls: Mapping[str, str] | None = None,
                 max_wait: float = DEFAULT_MAX_WAIT, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.services = BackendServices(limiter or NO_LIMITS, float(max_wait))
        self.prices = prices if isinstance(prices, PriceTable) else PriceTable(prices)
        self.base_urls = check_base_urls(base_urls or {})
        self.timeout = float(timeout)

    @property
    def limiter(self) -> Limiter:
        return self.services.limiter

    def base_url(self, ref: ModelRef) -> str | None:
        """The provider's own base URL, else its vendor's (``openai-chat`` falls back to
        ``openai``; ``openai`` never to ``openai-chat``), else None: the SDK's default."""
        return self.base_urls.get(ref.provider) or self.base_urls.get(ref.vendor)

    def request(self, ref: ModelRef | str, messages: Sequence[Message],
                tools: Iterable[Any] | None = (), **options: Any) -> LLMRequest:
        """The request a call sends (validated where it is written: ``InvalidModelRef``
        for a bad reference, ``BackendError(kind="invalid_request")`` for an unknown
        option, ``kind="invalid_tool"`` for a tool the APIs would refuse). ``tools``:
        ``ToolSpec`` s, ``ToolDecl`` s or their JSON, ``None`` for none
        (:func:`~hypha_celery.backends.llm.types.tool_decls`)."""
        ref = ModelRef.parse(ref)
        unknown = ref.unknown_options(options)
        if unknown:
            raise BackendError(ref.vendor, "invalid_request", False,
                               message=f"unknown model option {unknown[0]!r}")
        return ref.request(tuple(messages), _tools(ref.vendor, tools), **options)

    def call(self, ref: ModelRef | str, messages: Sequence[Message],
             tools: Iterable[Any] | None = (), *, live: LiveSink | None = None,
             cancelled: Callable[[], bool] | None = None, key_env: str | None = None,
             watch: Watch | None = None, **options: Any) -> LLMCall:
        """One streamed call to its end. ``live``: publish its stream there;
        ``cancelled``: checked between stream events (true: the stream is closed and the
        call fails ``cancelled``); ``watch``: ``with watch(stream.close):`` is held while
        the stream is read, so a watcher elsewhere can close a stream blocked in a read
        (a run's cancel, see :mod:`hypha_celery.runtime.cancels`)."""
        ref = ModelRef.parse(ref)
        request = self.request(ref, messages, tools, **options)
        module = provider(ref.provider)
        vendor = module.VENDOR
        key = resolve_key(vendor, key_env)
        slot, wait = self.services.admit(vendor, key, request)
        began = time.perf_counter()
        try:
            stream = module.open_stream(request, key=key, base_url=self.base_url(ref),
                                        timeout=self.timeout)
            with stream, (watch(stream.close) if watch is not None else nullcontext()):
                reasoning = _drain(stream, live, cancelled, vendor)
                result = stream.result
        except BackendError as exc:
            self.services.report(vendor, key, exc)
            raise
        finally:
            slot.release()
        if result is None:
            raise errors.incomplete_stream(vendor)
        latency = (time.perf_counter() - began) * 1000.0
        return LLMCall(ref, result, latency, wait * 1000.0, self.prices.cost(ref, result.usage),
                       reasoning)

    def close(self) -> None:
        self.services.limiter.close()


def check_base_urls(urls: Mapping[str, Any]) -> dict[str, str]:
    """Base URLs by provider (``openai``, ``openai-chat``, ``anthropic``; the vendors are
    providers too): ``InvalidModelRef`` for a name no provider has (a typo would otherwise
    send calls to the SDK's default), ``TypeError`` for a URL that is not text."""
    for name, url in urls.items():
        if name not in PROVIDERS:
            raise InvalidModelRef(f"base URL for unknown model provider {name!r}: one of "
                                  f"{sorted(PROVIDERS)}")
        if not isinstance(url, str) or not url:
            raise TypeError(f"the base URL of {name!r} must be a non-empty string")
    return dict(urls)


def _tools(vendor: str, tools: Iterable[Any] | None) -> tuple[ToolDecl, ...]:
    """``tools`` as declarations both APIs accept, else ``BackendError(kind="invalid_tool")``."""
    try:
        decls = tool_decls(tools)
        ToolNames(decls)  # a name, an object schema, one wire name per tool
    except (TypeError, ValueError) as exc:
        raise BackendError(vendor, "invalid_tool", False, message=str(exc)) from None
    return decls


def _drain(stream: Any, live: LiveSink | None, cancelled: Callable[[], bool] | None,
           vendor: str) -> int:
    """Read ``stream`` to its end, publishing its events to ``live`` (see :class:`_Relay`);
    the characters of thinking its ``reasoning`` events reported."""
    reasoning = 0
    if live is None and cancelled is None:
        for event in stream:
            if event.kind == "reasoning":
                reasoning += _chars(event.data)
        return reasoning
    relay = _Relay(live) if live is not None else None
    for event in stream:
        if cancelled is not None and cancelled():
            stream.close()
            raise errors.cancelled(vendor)
        if event.kind == "reasoning":
            reasoning += _chars(event.data)
        if relay is not None:
            relay.event(event.kind, event.data)
    if relay is not None:
        relay.flush()
    return reasoning


def _chars(data: Mapping[str, Any]) -> int:
    """A ``reasoning`` event's character count (anything else counts 0)."""
    chars = data.get("chars")
    return chars if isinstance(chars, int) and not isinstance(chars, bool) and chars > 0 else 0


class _Relay:
    """A call's live items. Text deltas that follow each other within ``COALESCE_S`` of
    the last publish go out as one ``text`` item (the first delta, and any delta after a
    pause, at once): a dense stream costs a publish per few milliseconds, not per token,
    and a watcher sees a delta at most ``COALESCE_S`` late. Other items flush the text
    first, so the order holds."""

    def __init__(self, live: LiveSink) -> None:
        self.publish, self.topic, self.fields = live.bus.publish, live.topic, dict(live.fields)
        self.pending: list[str] = []
        self.sent_at = 0.0

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "text":
            self.pending.append(data.get("text", ""))
            now = time.monotonic()
            if now - self.sent_at >= COALESCE_S:
                self.flush(now)
            return
        item = _item(kind, data)
        if item is not None:
            self.flush()
            self.publish(self.topic, {**item, **self.fields})

    def flush(self, now: float | None = None) -> None:
        if self.pending:
            text = "".join(self.pending)
            self.pending.clear()
            self.sent_at = time.monotonic() if now is None else now
            self.publish(self.topic, {"kind": "text", "text": text, **self.fields})


def _item(kind: str, data: dict[str, Any]) -> LiveItem | None:
    if kind == "text":
        return {"kind": "text", "text": data.get("text", "")}
    if kind == "tool_use":
        return {"kind": "tool_use", "id": data.get("id"), "name": data.get("name")}
    if kind in ("usage", "reasoning"):
        return {"kind": kind, **data}
    return None
