"""``Response`` (a successful turn) and ``collect()``, the pure builder that consumes a
backend stream under the per-turn event bounds (GenAgent ``Response`` and event capture).

Rules:

* consumption stops at the first terminal event (``result`` or ``error``); the iterator is
  closed then;
* ``text`` is the result's ``data.text`` when it is a non-empty string, else the text deltas
  joined, with a blank line (``"\\n\\n"``) before each ``message_boundary`` delta that
  follows earlier text; every observed delta counts, retained or not;
* ``final_message`` is the result text, else the last message (the deltas since the last
  boundary, or all of them when none was marked);
* ``usage`` is the data of the latest ``usage`` event; ``session_id`` and ``model`` come
  from the terminal event's data;
* bounds: an event is retained while the retained count stays ≤ ``max_events`` and the
  retained bytes (JSON of each event's ``data``) ≤ ``max_bytes``. At the first event that
  does not fit, ``"compact"`` keeps the prefix and omits everything after it (recorded in
  ``event_coverage``); ``"lossless"`` fails the turn with ``event_capture_overflow``;
* outcomes that are not a ``Response`` are a :class:`TurnError`: ``error`` terminal event
  (reason = its ``data.reason`` when a non-empty string, else ``"unknown"``),
  ``no_terminal_event``, ``task_crashed`` (the stream raised) and ``event_capture_overflow``.
  Their ``info`` is content free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Literal

from pydantic import TypeAdapter
from typing_extensions import TypedDict  # pydantic reads it (python < 3.12)

from hypha_celery.backends.error import BackendError, BackendErrorJson
from hypha_celery.backends.event import BackendEvent, BackendEventJson, monotonic_ms
from hypha_celery.jsontypes import JsonObject

Retention = Literal["compact", "lossless"]
MAX_EVENTS_PER_TURN = 1_000
MAX_EVENT_BYTES_PER_TURN = 1_048_576


class FirstOmission(TypedDict):
    limit: Literal["events", "bytes"]
    event_kind: str


class EventCoverage(TypedDict):
    """How much of a turn's stream a :class:`Response` kept (stored with the turn)."""

    mode: Literal["exact", "compact"]
    observed_events: int
    retained_events: int
    omitted_events: int
    retained_bytes: int
    first_omission: FirstOmission | None


class ResponseJson(TypedDict):
    """A :class:`Response` as stored with its turn (``to_json``)."""

    prompt: str
    text: str
    final_message: str
    events: list[BackendEventJson]
    terminal: BackendEventJson
    event_coverage: EventCoverage
    usage: JsonObject | None
    duration_ms: float
    metadata: JsonObject
    session_id: str | None
    model: str | None


class TurnErrorJson(TypedDict):
    reason: str
    info: Mapping[str, object]
    terminal: BackendEventJson | None


class CrashInfo(TypedDict, total=False):
    """The content-free ``info`` of a ``task_crashed`` :class:`TurnError`."""

    exception: str
    backend_error: BackendErrorJson


@dataclass(frozen=True, slots=True)
class Response:
    prompt: str
    text: str
    final_message: str
    events: tuple[BackendEvent, ...]
    terminal: BackendEvent
    event_coverage: EventCoverage
    usage: JsonObject | None = None  # the last ``usage`` event's data (the backend's)
    duration_ms: float = 0.0
    metadata: JsonObject = field(default_factory=dict)
    session_id: str | None = None
    model: str | None = None

    def to_json(self) -> ResponseJson:
        """Every field, in order (stored with its turn)."""
        json: ResponseJson = _RESPONSE.dump_python(self, mode="json")
        return json

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Response:
        """The response :meth:`to_json` wrote (a ``ValidationError`` for another shape)."""
        return _RESPONSE.validate_python(doc)


@dataclass(frozen=True, slots=True)
class TurnError:
    """A failed turn: ``reason`` (GenAgent's error term), content-free ``info``, and the
    terminal ``error`` event when there was one (its data is the backend's, not redacted)."""

    reason: str
    info: Mapping[str, object] = field(default_factory=dict)  # content free, JSON
    terminal: BackendEvent | None = None

    def to_json(self) -> TurnErrorJson:
        json: TurnErrorJson = _TURN_ERROR.dump_python(self, mode="json")
        return json


_RESPONSE = TypeAdapter(Response)
_TURN_ERROR = TypeAdapter(TurnError)


@dataclass(slots=True)
class _Capture:
    max_events: int
    max_bytes: int
    retained: list[BackendEvent] = field(default_factory=list)
    retained_bytes: int = 0
    observed: int = 0
    first_omission: FirstOmission | None = None

    def offer(self, event: BackendEvent) -> str | None:
        """Count ``event``; retain it while the prefix fits. Returns the limit the first
        omitted event broke (``"events"`` / ``"bytes"``), None otherwise."""
        self.observed += 1
        if self.first_omission is not None:
            return None
        limit: Literal["events", "bytes"]
        if len(self.retained) + 1 > self.max_events:
            limit = "events"
        elif self.retained_bytes + event.size > self.max_bytes:
            limit = "bytes"
        else:
            self.retained.append(event)
            self.retained_bytes += event.size
            return None
        self.first_omission = {"limit": limit, "event_kind": event.kind}
        return limit

    def coverage(self) -> EventCoverage:
        return {"mode": "exact" if self.first_omission is None else "compact",
                "observed_events": self.observed, "retained_events": len(self.retained),
                "omitted_events": self.observed - len(self.retained),
                "retained_bytes": self.retained_bytes, "first_omission": self.first_omission}


@dataclass(slots=True)
class _Text:
    parts: list[str] = field(default_factory=list)
    last_start: int = 0  # index in parts where the last message starts

    def add(self, data: JsonObject) -> None:
        delta = data.get("text")
        if not isinstance(delta, str):
            return
        if data.get("message_boundary") is True:
            if self.parts:
                self.parts.append("\n\n")
            self.last_start = len(self.parts)
        self.parts.append(delta)

    def full(self) -> str:
        return "".join(self.parts)

    def last_message(self) -> str:
        return "".join(self.parts[self.last_start:])


def collect(prompt: str, events: Iterable[BackendEvent], *, max_events: int = MAX_EVENTS_PER_TURN,
            max_bytes: int = MAX_EVENT_BYTES_PER_TURN, retention: Retention = "compact",
            clock: Callable[[], float] = monotonic_ms, started_ms: float | None = None,
            session_id: str | None = None, metadata: JsonObject | None = None,
            on_event: Callable[[BackendEvent], None] | None = None,
            propagate: tuple[type[BaseException], ...] = ()) -> Response | TurnError:
    """Consume one turn's stream. ``clock`` returns milliseconds; ``duration_ms`` runs from
    ``started_ms`` (default: now) to the terminal event. ``on_event`` sees every consumed
    event in order (an event rejected by ``"lossless"`` is not passed to it).
    ``session_id`` is the fallback when the terminal event carries none. An exception from
    the stream or ``on_event`` is a ``task_crashed`` outcome, except ``propagate`` types
    (for instance a watchdog's soft time limit), which are re-raised."""
    _check_bounds(max_events, max_bytes, retention)
    start = clock() if started_ms is None else started_ms
    capture, text = _Capture(max_events, max_bytes), _Text()
    usage: JsonObject | None = None
    iterator = iter(events)
    try:
        for event in iterator:
            if not isinstance(event, BackendEvent):
                raise TypeError(f"a backend stream yielded {type(event).__name__}, "
                                "not BackendEvent")
            limit = capture.offer(event)
            if limit is not None and retention == "lossless":
                return _overflow(capture, limit, event)
            if on_event is not None:
                on_event(event)
            if event.kind == "text":
                text.add(event.data)
            elif event.kind == "usage":
                usage = event.data
            if event.terminal:
                return _finish(prompt, event, capture, text, usage, clock() - start,
                               session_id, metadata or {})
    except propagate:
        raise
    except Exception as exc:
        return TurnError("task_crashed", _crash_info(exc))
    finally:
        close = getattr(iterator, "close", None)
        if callable(close):
            with suppress(Exception):
                close()
    return TurnError("no_terminal_event")


def _check_bounds(max_events: int, max_bytes: int, retention: str) -> None:
    if not (isinstance(max_events, int) and max_events > 0):
        raise ValueError("max_events must be a positive integer")
    if not (isinstance(max_bytes, int) and max_bytes > 0):
        raise ValueError("max_bytes must be a positive integer")
    if retention not in ("compact", "lossless"):
        raise ValueError("retention must be 'compact' or 'lossless'")


def _overflow(capture: _Capture, limit: str, event: BackendEvent) -> TurnError:
    return TurnError("event_capture_overflow", {
        "limit": limit, "max_events": capture.max_events, "max_bytes": capture.max_bytes,
        "retained_events": len(capture.retained), "retained_bytes": capture.retained_bytes,
        "rejected_event_kind": event.kind, "rejected_event_bytes": event.size})


def _finish(prompt: str, terminal: BackendEvent, capture: _Capture, text: _Text,
            usage: JsonObject | None, duration_ms: float, session_id: str | None,
            metadata: JsonObject) -> Response | TurnError:
    data = terminal.data
    if terminal.kind == "error":
        reason = data.get("reason")
        return TurnError(reason if isinstance(reason, str) and reason else "unknown",
                         terminal=terminal)
    raw_text = data.get("text")
    result_text = raw_text if isinstance(raw_text, str) and raw_text else None
    sid, model = data.get("session_id"), data.get("model")
    return Response(
        prompt=prompt, text=result_text or text.full(),
        final_message=result_text or text.last_message(),
        events=tuple(capture.retained), terminal=terminal, event_coverage=capture.coverage(),
        usage=usage, duration_ms=duration_ms, metadata=metadata,
        session_id=sid if isinstance(sid, str) else session_id,
        model=model if isinstance(model, str) else None)


def _crash_info(exc: Exception) -> CrashInfo:
    info: CrashInfo = {"exception": type(exc).__name__}
    if isinstance(exc, BackendError):
        info["backend_error"] = exc.to_json()
    return info
