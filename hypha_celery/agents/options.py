"""Start options of an agent: GenAgent's bounds and defaults, validated when ``start`` is
called (a bad value is an :class:`~hypha_celery.errors.AgentSpecError`, nothing starts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import TypeAdapter

from hypha_celery.errors import AgentSpecError
from hypha_celery.lanes import Bound

RESERVED = ("watchdog_ms", "max_tell_results", "max_tell_result_bytes", "max_events_per_turn",
            "max_event_bytes_per_turn", "event_retention", "max_pending_prompts",
            "max_pending_prompt_bytes", "max_pending_notifications",
            "max_pending_notification_bytes")


@dataclass(frozen=True, slots=True)
class Limits:
    #: Per-attempt deadline of a turn (milliseconds).
    watchdog_ms: int = 600_000
    #: Finished tell results kept for ``poll`` (count, JSON bytes); oldest evicted first.
    max_tell_results: int = 100
    max_tell_result_bytes: int = 8_388_608
    #: Events retained in a turn's ``Response`` (count, bytes of their data as JSON).
    max_events_per_turn: int = 1_000
    max_event_bytes_per_turn: int = 1_048_576
    #: ``compact``: keep a prefix and say so in ``event_coverage``; ``lossless``: fail
    #: the turn with ``event_capture_overflow``.
    event_retention: str = "compact"
    #: The prompt FIFO (a self-chain has one reserved slot outside the count, not bytes).
    max_pending_prompts: int = 1_000
    max_pending_prompt_bytes: int = 1_048_576
    #: Notifications deferred while a turn runs.
    max_pending_notifications: int = 1_000
    max_pending_notification_bytes: int = 1_048_576

    @classmethod
    def from_options(cls, opts: dict[str, Any]) -> Limits:
        given = {k: opts[k] for k in RESERVED if opts.get(k) is not None}
        limits = cls(**given)
        limits.check()
        return limits

    def check(self) -> None:
        for name, value in asdict(self).items():
            if name == "event_retention":
                if value not in ("compact", "lossless"):
                    raise AgentSpecError(f"event_retention must be 'compact' or 'lossless', "
                                         f"got {value!r}")
                continue
            positive = name in ("watchdog_ms", "max_events_per_turn",
                                "max_event_bytes_per_turn")
            if isinstance(value, bool) or not isinstance(value, int) or value < int(positive):
                kind = "a positive" if positive else "a non-negative"
                raise AgentSpecError(f"{name} must be {kind} integer, got {value!r}")

    @property
    def prompts(self) -> Bound:
        return Bound(self.max_pending_prompts, self.max_pending_prompt_bytes)

    @property
    def notifications(self) -> Bound:
        return Bound(self.max_pending_notifications, self.max_pending_notification_bytes)

    def to_json(self) -> dict[str, object]:
        """Every bound, in field order (an agent doc's ``limits``)."""
        json: dict[str, object] = _LIMITS.dump_python(self)
        return json

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Limits:
        """The bounds :meth:`to_json` wrote (a ``ValidationError`` for another shape)."""
        return _LIMITS.validate_python(data)


_LIMITS = TypeAdapter(Limits)
