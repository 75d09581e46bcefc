"""A bus message and what addresses it: endpoints, the scope, the queue key, statuses,
the retry policy and the bounds (hypha's ``RuntimeMessage``, snake_case)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from hypha_celery.runtime.config import BusSettings

#: Characters of an id (message, endpoint, user, session, correlation): a queue key
#: ``user:session:kind:id`` stays within the store's 420-character column.
MAX_ID_CHARS: Final = 100
#: Characters of a message type and of an FSM state name.
MAX_NAME_CHARS: Final = 120
#: Default bounds (hypha's transport bus: 256 KiB a message, 10,000 a queue).
MAX_MESSAGE_BYTES: Final = 262_144
MAX_QUEUE_MESSAGES: Final = 10_000
MAX_QUEUE_BYTES: Final = 67_108_864
#: Default retry policy (hypha's harness bus).
MAX_DELIVERY_ATTEMPTS: Final = 3
INITIAL_RETRY_DELAY_MS: Final = 250
MAX_RETRY_DELAY_MS: Final = 30_000
RETRY_MULTIPLIER: Final = 2.0
#: Seconds a delivered message stays with its consumer before another pull may take it
#: again (a consumer that died between pull and acknowledge; hypha's ack deadline).
ACK_DEADLINE_S: Final = 30.0
#: Seconds a message an agent accepted stays delivered while the turn runs: the agent
#: promised one completion (its reply acknowledges the message); past the hold (a stopped
#: agent sends none) it is delivered again. Longer than any turn, so a turn that outlasts
#: the ack deadline is never handed twice.
AGENT_HOLD_S: Final = 3_600.0
#: Settled messages (acknowledged, failed, dead-lettered) are deleted by the supervisor's
#: sweep this long after their last change, at most ``PRUNE_BATCH`` a sweep.
RETENTION_S: Final = 7 * 24 * 3600.0
PRUNE_BATCH: Final = 1_000


class EndpointKind(StrEnum):
    """Who sends or receives a message."""

    RUNTIME = "runtime"
    SESSION = "session"
    WORKFLOW = "workflow"
    AGENT = "agent"
    TOOL = "tool"
    HUMAN = "human"


class MessageStatus(StrEnum):
    """Where a message is. ``queued`` and ``delivered`` are live (they count against the
    queue's bounds); the other three are terminal and idempotent."""

    QUEUED = "queued"
    DELIVERED = "delivered"
    ACKNOWLEDGED = "acknowledged"
    FAILED = "failed"
    DEAD_LETTERED = "dead_lettered"

    @property
    def terminal(self) -> bool:
        return self not in (MessageStatus.QUEUED, MessageStatus.DELIVERED)


class DeadLetterReason(StrEnum):
    """Why the bus itself dead-lettered a message (a consumer may give its own)."""

    EXPIRED = "expired"
    BUDGET_EXHAUSTED = "delivery_attempt_budget_exhausted"
    POISON = "poison"
    #: to a workflow run that has ended (it reads nothing any more)
    RECIPIENT_ENDED = "recipient_ended"


_ID = Field(min_length=1, max_length=MAX_ID_CHARS, pattern=r"^[^:\s]+$")


class Endpoint(BaseModel):
    """``{kind, id}``: an agent by name, a workflow by run id, a human by user id, ..."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EndpointKind
    id: str = _ID

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.id}"

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """``"agent:writer"`` as an endpoint."""
        kind, _, ident = text.partition(":")
        return cls(kind=EndpointKind(kind), id=ident)


def agent(name: str) -> Endpoint:
    return Endpoint(kind=EndpointKind.AGENT, id=name)


def workflow(run_id: str) -> Endpoint:
    return Endpoint(kind=EndpointKind.WORKFLOW, id=run_id)


def human(user_id: str) -> Endpoint:
    return Endpoint(kind=EndpointKind.HUMAN, id=user_id)


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose messages: a user and a session (a queue belongs to exactly one)."""

    user_id: str
    session_id: str


def queue_key(scope: Scope, to: Endpoint) -> str:
    """hypha's queue key ``user:session:kind:id``."""
    return f"{scope.user_id}:{scope.session_id}:{to.kind.value}:{to.id}"


class Message(BaseModel):
    """One bus message (hypha's ``RuntimeMessage``). What a caller sets on ``publish``:
    ``type``, ``user_id``, ``session_id``, ``to``, ``payload`` (any JSON) and optionally
    the rest; the bus sets ``status``, the timestamps and ``attempt_count``.

    ``route``: endpoints a reply travels through after ``to`` (a routing slip: an agent's
    reply goes to ``route[0]`` carrying ``route[1:]``; an empty route replies to
    ``reply_to`` or, without one, to ``from_``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    id: str = Field(default_factory=lambda: uuid.uuid4().hex, min_length=1,
                    max_length=MAX_ID_CHARS, pattern=r"^[^:\s]+$")
    type: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    user_id: str = _ID
    session_id: str = _ID
    run_id: str | None = Field(default=None, max_length=64)
    from_: Endpoint = Field(alias="from")
    to: Endpoint
    reply_to: Endpoint | None = None
    route: tuple[Endpoint, ...] = Field(default=(), max_length=16)
    payload: JsonValue = None
    status: MessageStatus = MessageStatus.QUEUED
    created_at: float = 0.0
    updated_at: float = 0.0
    step_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    agent_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    fsm_state: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    correlation_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    causation_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    available_at: float = 0.0
    expires_at: float | None = None
    attempt_count: int = 0
    reason: str | None = Field(default=None, max_length=200)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("run_id is None or a non-empty string")
        return value

    @property
    def scope(self) -> Scope:
        return Scope(self.user_id, self.session_id)

    @property
    def queue(self) -> str:
        return queue_key(self.scope, self.to)

    @property
    def reply_target(self) -> tuple[Endpoint, tuple[Endpoint, ...]]:
        """Where a reply goes and the route it carries on."""
        if self.route:
            return self.route[0], self.route[1:]
        return (self.reply_to or self.from_), ()

    def doc(self) -> dict[str, Any]:
        """The JSON the store keeps (every field, by its JSON name)."""
        return self.model_dump(mode="json", by_alias=True)

    def size(self) -> int:
        """Bytes of the message's compact JSON: the unit of every bus byte bound."""
        return len(json.dumps(self.doc(), separators=(",", ":")).encode())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``fail(retry=True)``'s requeue: attempt ``n`` waits
    ``min(max_delay_ms, initial_delay_ms * multiplier ** (n - 1))`` (or the caller's
    ``retry_after_ms``); past ``max_delivery_attempts`` deliveries the message is
    dead-lettered (``delivery_attempt_budget_exhausted``)."""

    max_delivery_attempts: int = MAX_DELIVERY_ATTEMPTS
    initial_delay_ms: int = INITIAL_RETRY_DELAY_MS
    max_delay_ms: int = MAX_RETRY_DELAY_MS
    multiplier: float = RETRY_MULTIPLIER

    def __post_init__(self) -> None:
        if self.max_delivery_attempts < 1:
            raise ValueError("max_delivery_attempts is at least 1")
        if self.initial_delay_ms < 0 or self.max_delay_ms < 0 or self.multiplier < 1:
            raise ValueError("retry delays are >= 0 and the multiplier >= 1")

    @classmethod
    def from_settings(cls, settings: BusSettings) -> RetryPolicy:
        """The policy of ``Settings.bus`` (``HYPHA_BUS_MAX_DELIVERY_ATTEMPTS``,
        ``HYPHA_BUS_RETRY_*``)."""
        return cls(settings.max_delivery_attempts, settings.retry_initial_delay_ms,
                   settings.retry_max_delay_ms, settings.retry_multiplier)

    def delay_ms(self, attempt: int) -> int:
        return int(min(self.max_delay_ms,
                       self.initial_delay_ms * self.multiplier ** max(attempt - 1, 0)))


@dataclass(frozen=True, slots=True)
class BusLimits:
    """Every bound of the bus: a message's bytes (its compact JSON), a queue's live
    (queued or delivered) messages in count and bytes, the ack deadline (and the longer
    hold of a message an agent accepted, :data:`AGENT_HOLD_S`), and how long settled
    messages are kept (``retention_s``; the sweep deletes ``prune_batch`` at most at a
    time)."""

    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_queue_messages: int = MAX_QUEUE_MESSAGES
    max_queue_bytes: int = MAX_QUEUE_BYTES
    ack_deadline_s: float = ACK_DEADLINE_S
    retention_s: float = RETENTION_S
    prune_batch: int = PRUNE_BATCH
    agent_hold_s: float = AGENT_HOLD_S

    def __post_init__(self) -> None:
        if self.retention_s <= 0:
            raise ValueError("retention_s must be positive")
        for name in ("max_message_bytes", "max_queue_messages", "max_queue_bytes",
                     "prune_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.ack_deadline_s <= 0 or self.agent_hold_s <= 0:
            raise ValueError("ack_deadline_s and agent_hold_s must be positive")

    @classmethod
    def from_settings(cls, settings: BusSettings) -> BusLimits:
        """The bounds of ``Settings.bus`` (``HYPHA_BUS_*``)."""
        return cls(settings.max_message_bytes, settings.max_queue_messages,
                   settings.max_queue_bytes, settings.ack_deadline_s, settings.retention_s,
                   settings.prune_batch, settings.agent_hold_s)
