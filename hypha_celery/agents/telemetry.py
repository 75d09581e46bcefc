"""Agent telemetry: ``attach(event, handler)`` / ``detach``, and the emitters.

Content-free turn events, safe for metrics, logs and Flower (they are also sent as Celery
events, type ``hypha-agent-turn-<what>``, when the worker sends task events):

* ``("turn", "start")``: ``system_time``; metadata ``agent, ref, attempt, origin``
* ``("turn", "stop")``: ``duration_ms``; same metadata
* ``("turn", "error")``: ``duration_ms``; + ``reason_kind`` (``timeout``, ``interrupted``,
  ``task_crashed``, ``backend_or_callback_error``)
* ``("turn", "rejected")``: ``system_time``; + ``reason_kind`` (``overloaded``,
  ``pre_turn_skipped``, ``pre_turn_halted``, ``pre_turn_invalid``, ``draining``, ``halted``)
* ``("turn", "cancelled")``: ``system_time``; + ``reason_kind`` (``caller_cancelled``,
  ``caller_down``)

Each started ``(ref, attempt)`` gets exactly one terminal event, ``stop`` or ``error``.

Rich local events (may hold prompt text and state: never forward them to shared sinks):
``("prompt", "start"|"stop"|"error")``, ``("event", "received")``, ``("state", "changed")``
(``from`` / ``to``: ``idle`` / ``processing``), ``("mailbox", "queued")`` (``depth``),
``("input", "rejected")``, ``("halted",)``, ``("terminated",)``.

Handlers run synchronously in the process that emits (the worker that owns the turn, or
the caller for rejections); a handler that raises is logged (its exception type only)
and detached from nothing: telemetry never fails a turn.

The content-free events come from :class:`Telemetry`, a middleware (the agent turn hooks
of :mod:`hypha_celery.middleware`) that every :class:`~.runtime.AgentRuntime` has by
default; the rich local ones are emitted where they happen (:func:`rich`).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from hypha_celery.middleware import Middleware, MiddlewareStack, Turn, TurnEnd

log = logging.getLogger(__name__)

EventName = tuple[str, ...]
Handler = Callable[[EventName, dict[str, object], dict[str, object]], None]
CONTENT_FREE = frozenset({("turn", "start"), ("turn", "stop"), ("turn", "error"),
                          ("turn", "rejected"), ("turn", "cancelled")})

_handlers: dict[EventName, list[Handler]] = {}
_lock = threading.Lock()
Sink = Callable[[str, dict[str, object]], None]
_celery_sink: contextvars.ContextVar[Sink | None] = contextvars.ContextVar(
    "hypha_agent_celery_sink", default=None)


def _name(event: EventName | str) -> EventName:
    return tuple(event.split(".")) if isinstance(event, str) else tuple(event)


def attach(event: EventName | str, handler: Handler) -> None:
    """Call ``handler(event, measurements, metadata)`` for every ``event`` emitted in this
    process (``("turn", "stop")`` or ``"turn.stop"``)."""
    with _lock:
        _handlers.setdefault(_name(event), []).append(handler)


def detach(event: EventName | str, handler: Handler) -> None:
    with _lock:
        found = _handlers.get(_name(event), [])
        if handler in found:
            found.remove(handler)


def emit(event: EventName, measurements: dict[str, Any], metadata: dict[str, Any]) -> None:
    with _lock:
        handlers = list(_handlers.get(event, ()))
    for handler in handlers:
        try:
            handler(event, measurements, metadata)
        except Exception as exc:  # telemetry never fails a turn
            log.warning("agent telemetry handler for %s raised %s", ".".join(event),
                        type(exc).__name__)
    sink = _celery_sink.get()
    if event in CONTENT_FREE and sink is not None:
        try:
            sink("hypha-agent-" + "-".join(event), {**measurements, **metadata})
        except Exception as exc:
            log.warning("agent telemetry: sending a Celery event failed: %s",
                        type(exc).__name__)


def set_celery_sink(sink: Sink | None) -> contextvars.Token[Sink | None]:
    """Send content-free events to ``sink`` too, in this thread (the pump task)."""
    return _celery_sink.set(sink)


def reset_celery_sink(token: contextvars.Token[Sink | None]) -> None:
    _celery_sink.reset(token)


class Telemetry(Middleware):
    """The content-free ``("turn", ...)`` events, from the agent turn hooks."""

    def before_turn(self, turn: Turn) -> None:
        emit(("turn", "start"), {"system_time": time.time()}, _meta(turn))

    def after_turn(self, turn: Turn, end: TurnEnd) -> None:
        if end.reason_kind is None:
            emit(("turn", "stop"), {"duration_ms": end.duration_ms}, _meta(turn))
        else:
            emit(("turn", "error"), {"duration_ms": end.duration_ms},
                 {**_meta(turn), "reason_kind": end.reason_kind})

    def after_turn_rejected(self, turn: Turn, reason: str) -> None:
        emit(("turn", "rejected"), {"system_time": time.time()},
             {**_meta(turn), "reason_kind": reason})

    def after_turn_cancelled(self, turn: Turn, reason: str) -> None:
        emit(("turn", "cancelled"), {"system_time": time.time()},
             {**_meta(turn), "reason_kind": reason})


def _meta(turn: Turn) -> dict[str, Any]:
    return {"agent": turn.agent, "ref": turn.ref, "attempt": turn.attempt,
            "origin": turn.origin}


def default_stack() -> MiddlewareStack:
    """What an agent runtime calls by default: the telemetry."""
    return MiddlewareStack([Telemetry()])


def rich(what: EventName, agent: str, **metadata: Any) -> None:
    with _lock:
        wanted = bool(_handlers.get(what))
    if wanted:
        emit(what, {"system_time": time.time()}, {"agent": agent, **metadata})
