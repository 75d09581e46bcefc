"""``BackendEvent``: one normalized item of a backend's stream (GenAgent ``%Event{}``).

Kinds the core understands: ``session`` (backend metadata), ``text`` (``data.text``, an
assistant delta; ``message_boundary: true`` starts a new message), ``tool_use`` /
``tool_result``, ``usage`` (``input_tokens``, ``output_tokens``), ``result`` (terminal
success, at least ``data.text``) and ``error`` (terminal failure, ``data.reason``). Any other
string is accepted and is not terminal.

``data`` is JSON only: events go into the event log and through Celery messages. It must
survive a JSON round trip unchanged (no tuples, no non-string keys, no NaN) and must not be
mutated after the event is built (its encoded size is measured once, at construction).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, cast

from pydantic import ConfigDict, Strict, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic reads it (python < 3.12)

from hypha_celery.errors import HyphaRuntimeError
from hypha_celery.jsontypes import JsonObject

TERMINAL_KINDS = frozenset({"result", "error"})

_encode = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode
_encode_str: Any = getattr(json.encoder, "c_encode_basestring_ascii", None) \
    or json.encoder.encode_basestring_ascii
_TEXT_FRAME = len('{"text":}')
_new = object.__new__
_monotonic = time.monotonic


class InvalidEvent(HyphaRuntimeError, TypeError):
    """An event whose kind, data or timestamp is not plain JSON of the right shape."""


def monotonic_ms() -> float:
    """Monotonic milliseconds: good for durations, not a wall-clock time."""
    return time.monotonic() * 1000.0


def data_bytes(data: JsonObject) -> int:
    """Length of the compact, ASCII-escaped JSON encoding of ``data`` (as
    ``graph/jsonsafe.json_size``): the unit of the per-turn byte bound."""
    try:
        encoded = _encode(data)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidEvent(f"event data is not JSON: {type(exc).__name__}") from None
    if not _flat(data) and json.loads(encoded) != data:
        raise InvalidEvent("event data does not survive a JSON round trip "
                           "(tuples, non-string keys or other non-JSON values)")
    return len(encoded.encode())


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flat(data: JsonObject) -> bool:
    """String keys and plain scalar values (a text delta): such data always survives a
    JSON round trip once it encoded (NaN and infinities do not encode), so the costly
    decode check is skipped -- it runs once per streamed token."""
    return all(type(k) is str for k in data) and all(type(v) in _SCALARS
                                                     for v in data.values())


class BackendEventJson(TypedDict):
    """A :class:`BackendEvent` as JSON (``to_json``): what the event log stores."""

    kind: str
    data: JsonObject
    timestamp_ms: float


@dataclass(frozen=True, slots=True)
class BackendEvent:
    kind: Annotated[str, Strict()]  # (Strict: how pydantic reads it in from_json)
    data: JsonObject
    timestamp_ms: Annotated[float, Strict()]
    size: int = field(init=False, repr=False, compare=False)  # bytes of ``data`` as JSON

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise InvalidEvent("event kind must be a non-empty string")
        if not isinstance(self.data, dict):
            raise InvalidEvent(f"event data must be a dict, not {type(self.data).__name__}")
        ts = self.timestamp_ms
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
            raise InvalidEvent("event timestamp_ms must be a finite number")
        object.__setattr__(self, "size", data_bytes(self.data))

    @classmethod
    def new(cls, kind: str, data: Mapping[str, object] | None = None) -> BackendEvent:
        """An event of ``kind`` now; ``data`` is kept as given (a dict is not copied) and
        checked to be JSON here (:class:`InvalidEvent` otherwise)."""
        doc = {} if data is None else data if isinstance(data, dict) else dict(data)
        return cls(kind, cast(JsonObject, doc), monotonic_ms())

    @classmethod
    def text(cls, delta: str) -> BackendEvent:
        """A ``text`` delta, built on the hot path of a stream: a string is always JSON,
        so its size is counted without the round trip :func:`data_bytes` makes."""
        if not isinstance(delta, str):
            raise InvalidEvent(f"a text delta must be a str, not {type(delta).__name__}")
        event = _new(cls)
        _SET_KIND(event, "text")
        _SET_DATA(event, {"text": delta})
        _SET_TIMESTAMP(event, _monotonic() * 1000.0)
        _SET_SIZE(event, len(_encode_str(delta)) + _TEXT_FRAME)
        return event

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL_KINDS

    #: Read by :data:`_EVENT`: exactly ``kind``, ``data``, ``timestamp_ms``.
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    def to_json(self) -> BackendEventJson:
        """Written by hand, once per streamed event: ``data`` is passed on as it is, not
        copied as pydantic's serializer would (docs/architecture.md, "Serialization")."""
        return {"kind": self.kind, "data": self.data, "timestamp_ms": self.timestamp_ms}

    @classmethod
    def from_json(cls, doc: object) -> BackendEvent:
        """The event :meth:`to_json` wrote; :class:`InvalidEvent` for anything else."""
        try:
            return _EVENT.validate_python(doc)
        except ValidationError:
            raise InvalidEvent("an event is a JSON object with exactly kind, data (a JSON "
                               "object), timestamp_ms") from None


_EVENT = TypeAdapter(BackendEvent)

# The slots' own setters (a frozen dataclass refuses ``event.kind = ...``): what
# :meth:`BackendEvent.text` fills a new event with, at half the cost of ``object.__setattr__``.
_SET_KIND = BackendEvent.__dict__["kind"].__set__
_SET_DATA = BackendEvent.__dict__["data"].__set__
_SET_TIMESTAMP = BackendEvent.__dict__["timestamp_ms"].__set__
_SET_SIZE = BackendEvent.__dict__["size"].__set__
