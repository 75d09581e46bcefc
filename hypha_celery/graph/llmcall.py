"""``ctx.llm``: a model call over a real provider, recorded like ``ctx.model``.

The call goes through the runtime's :class:`~hypha_celery.backends.llm.client.LLMClient`
(rate limits, key, prices); without a runtime (a context built by hand) a process-wide
client with no limits is used. What the log gets, per call:

* ``model.call.started``: ``model`` (the reference, ``openai:gpt-4.1-mini``),
  ``provider``, ``request_hash`` (the request itself is never stored: it holds the
  prompt), ``request_bytes``;
* ``model.call.completed``: ``output`` (the answer: ``text``, ``tool_calls``, ``usage``,
  ``stop_reason``, ``model``, ``response_id``: what a replay serves), ``usage``,
  ``latency_ms``, ``wait_ms`` (time spent waiting for the rate limiter) and
  ``cost_usd`` when the model has a price;
* ``model.call.failed``: the error (its type, a content-free message and its class) and
  ``latency_ms``.

A run's cancel closes a call's stream even while it waits for the provider's next
byte: the runtime's cancel flag (``ctx._cancelled``, see
:mod:`hypha_celery.runtime.cancels`) has the process's run watch hold the call, so the
stream reads nothing per delta. A context built by hand has its ``cancelled()`` looked at
between events instead.

A provider's thinking is never recorded: its stream reports a character count
(``reasoning`` events), and a call that reported some writes ``thinking.started`` and
``thinking.completed`` (``mode`` ``summary``, ``chars``; ``tokens`` stays None: the
providers' usage does not split reasoning tokens out) right after its
``model.call.completed``, with the node's id and the caller's ``step`` (a ReAct
iteration). In a replay (:mod:`hypha_celery.rerun`) the recorded answer is served and nothing is
called; the n-th call must name the same model with the same request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hypha_celery.backends.llm.client import LiveSink, LLMClient
from hypha_celery.backends.llm.ref import ModelRef
from hypha_celery.backends.llm.types import LLMResult, Message
from hypha_celery.events import payloads as ev
from hypha_celery.events.envelope import canonical
from hypha_celery.graph.calls import CallRecord, Calls
from hypha_celery.live import run_topic

if TYPE_CHECKING:
    from hypha_celery.graph.model import NodeContext

__all__ = ["call_llm", "default_client", "thinking_events"]

_default: LLMClient | None = None
_default_lock = threading.Lock()


def default_client() -> LLMClient:
    """The client of contexts without a runtime: no rate limits, no prices."""
    global _default
    with _default_lock:
        if _default is None:
            _default = LLMClient()
        return _default


def thinking_events(chars: int, tokens: int | None = None, *, step: int | None = None,
                    node: str | None = None) -> tuple[ev.ThinkingStarted, ev.ThinkingCompleted]:
    """What a model call's thinking writes: ``thinking.started`` and
    ``thinking.completed`` with its counts (``mode`` ``summary``: counts only, never the
    text)."""
    return (ev.ThinkingStarted(step=step, node=node, mode="summary"),
            ev.ThinkingCompleted(step=step, node=node, mode="summary", chars=chars,
                                 tokens=tokens))


def call_llm(ctx: NodeContext, calls: Calls, ref: ModelRef, messages: Sequence[Message],
             tools: Iterable[Any] | None, options: Mapping[str, Any],
             step: int | None = None) -> LLMResult:
    client = ctx._llm or default_client()
    request = client.request(ref, messages, tools, **options)
    recorded = {"ref": str(ref), **request.to_json()}
    call_id = calls.next_id("model")
    live = None if ctx._live is None or calls.replaying else LiveSink(
        ctx._live, run_topic(ctx.run_id), {"execution_id": ctx.execution_id, "call_id": call_id})
    measures: dict[str, Any] = {}
    thought: list[int] = []  # the thinking's characters, once the call returned
    began = time.perf_counter()

    def call(_: Any) -> Any:
        watch = getattr(ctx._cancelled, "watching", None)  # the runtime's: see the docstring
        done = client.call(ref, request.messages, request.tools, live=live,
                           cancelled=None if watch is not None else ctx.cancelled,
                           watch=watch, **request.options)
        measures.update(done.measures())
        thought.append(done.reasoning_chars)
        return done.result.to_json()

    def measured() -> dict[str, Any]:
        return measures or {"latency_ms": round((time.perf_counter() - began) * 1000.0, 3)}

    extra: CallRecord = {"provider": ref.provider,
                         "request_bytes": len(canonical(recorded).encode())}
    output = calls.call("model", str(ref), call, recorded, extra, measured)
    if thought and thought[0] > 0:  # a live call whose provider reported thinking
        for payload in thinking_events(thought[0], step=step, node=ctx.node_id):
            ctx.emit(payload)
    return LLMResult.from_json(output)
