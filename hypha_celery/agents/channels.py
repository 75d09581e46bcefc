"""Where completions and streamed events go: a :class:`Channel` the caller reads with
``agents.receive(channel)``, or a Celery signature called with ``(name, ref, outcome)``.

A channel is a named FIFO of JSON messages: a Redis list ``hypha:agent-channel:<name>``
(expiring an hour after its last message) when the app has a Redis broker or result
backend, else an in-process queue (the embedded default). A list, not pub/sub: a message
pushed before the caller starts listening is kept, so a completion that arrives before
``tell_with_completion`` returns is not lost.

Messages: ``{"type": "event", "agent", "ref", "event"}`` for each streamed event, in stream
order and all before the completion; ``{"type": "completion", "agent", "ref", "outcome"}``
once per request, where ``outcome`` is ``{"ok": <Response JSON>}`` or ``{"error": reason,
"info": {...}}``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypedDict, cast

from celery import Celery, signature
from celery.canvas import Signature
from pydantic import Discriminator, Field, Tag, TypeAdapter

from hypha_celery.backends.gate import GateChannel, InProcessGateChannel, RedisGateChannel
from hypha_celery.errors import AgentSpecError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Channel:
    """A named FIFO of messages (JSON ``{"channel": name}`` as a target)."""

    name: Annotated[str, Field(alias="channel")]

    @classmethod
    def new(cls) -> Channel:
        return cls(uuid.uuid4().hex)

    def to_json(self) -> dict[str, object]:
        return _json(self)


@dataclass(frozen=True, slots=True)
class SignatureTarget:
    """A Celery signature called with ``(name, ref, outcome)`` (JSON
    ``{"signature": <its dict form>}``); it receives completions only."""

    signature: dict[str, Any]

    def to_json(self) -> dict[str, object]:
        return _json(self)


Target = Channel | SignatureTarget


def _target_kind(data: object) -> str:
    if isinstance(data, Channel | SignatureTarget):
        return type(data).__name__
    return "Channel" if isinstance(data, dict) and "channel" in data else "SignatureTarget"


#: A :data:`Target` as pydantic reads it: ``{"channel": name}`` or ``{"signature": {...}}``.
TargetField = Annotated[
    Annotated[Channel, Tag("Channel")] | Annotated[SignatureTarget, Tag("SignatureTarget")],
    Discriminator(_target_kind)]
#: Reads and writes a target's JSON.
TARGET: TypeAdapter[Target] = TypeAdapter(TargetField)


def _json(value: Target) -> dict[str, object]:
    json: dict[str, object] = TARGET.dump_python(value, by_alias=True)
    return json


def target(recipient: Channel | Signature | None) -> Target | None:
    """A recipient as a target, validated at call time."""
    if recipient is None or isinstance(recipient, Channel):
        return recipient
    if isinstance(recipient, Signature):
        return SignatureTarget(dict(recipient))
    raise AgentSpecError(f"a recipient is a Channel or a Celery signature, got "
                         f"{type(recipient).__name__}")


def target_from(data: object) -> Target | None:
    """A target from its JSON (a stored request, the outbox); None from null."""
    return None if data is None else TARGET.validate_python(data)


class CompletionMessage(TypedDict):
    """A request's completion on a channel (:meth:`Completion.to_json`)."""

    type: Literal["completion"]
    agent: str
    ref: str
    outcome: object  # JSON: {"ok": <Response JSON>} or {"error": reason, "info": {...}}


class EventMessage(TypedDict):
    """One streamed event of a request on a channel (:meth:`Streamed.to_json`)."""

    type: Literal["event"]
    agent: str
    ref: str
    event: object  # a BackendEvent's JSON


#: What :meth:`Transport.receive` (``agents.receive``) returns: tell them apart by ``type``.
ChannelMessage = CompletionMessage | EventMessage


@dataclass(frozen=True, slots=True)
class Completion:
    """The one completion of a request: ``outcome`` is its JSON (``{"ok": ...}`` or
    ``{"error", "info"}``)."""

    type: Literal["completion"] = field(default="completion", init=False, repr=False)
    agent: str
    ref: str
    outcome: Any  # JSON, as given

    def to_json(self) -> CompletionMessage:
        json: CompletionMessage = _COMPLETION.dump_python(self)
        return json

    @classmethod
    def from_json(cls, data: object) -> Completion:
        return _COMPLETION.validate_python(data)


@dataclass(frozen=True, slots=True)
class Streamed:
    """One streamed event of a request (its JSON), relayed to ``stream_to``."""

    type: Literal["event"] = field(default="event", init=False, repr=False)
    agent: str
    ref: str
    event: Any  # a BackendEvent's JSON, as given

    def to_json(self) -> EventMessage:
        json: EventMessage = _STREAMED.dump_python(self)
        return json


_COMPLETION = TypeAdapter(Completion)
_STREAMED = TypeAdapter(Streamed)


_CHANNEL_PREFIX = "hypha:agent-channel:"
_FENCE_PREFIX = "hypha:agent-fence:"
_TTL_S = 3600
#: RPUSH a streamed event unless its request was fenced (interrupted, stopped): atomic, so
#: nothing reaches the channel once ``interrupt_request`` has returned ``accepted``.
_RELAY_LUA = """
if redis.call('exists', KEYS[1]) == 1 then return 0 end
redis.call('rpush', KEYS[2], ARGV[1])
redis.call('expire', KEYS[2], ARGV[2])
return 1
"""
_LOCAL_FENCES = 10_000


class Transport:
    """Delivers messages to targets for one app."""

    def __init__(self, app: Celery, redis_url: str | None) -> None:
        self._app = app
        self._redis: Any = None
        self._queues: GateChannel
        if redis_url:
            import redis

            self._queues = RedisGateChannel(redis_url, _CHANNEL_PREFIX)
            self._redis = redis.Redis.from_url(redis_url)
            self._relay_script = self._redis.register_script(_RELAY_LUA)
        else:
            self._queues = InProcessGateChannel()
        self._fences: dict[str, None] = {}  # in-process: insertion-ordered, bounded
        self._lock = threading.Lock()

    def fence(self, ref: str) -> None:
        """After this returns, no streamed event of ``ref`` is relayed any more."""
        if self._redis is not None:
            self._redis.set(_FENCE_PREFIX + ref, b"1", ex=_TTL_S)
            return
        with self._lock:
            self._fences[ref] = None
            while len(self._fences) > _LOCAL_FENCES:
                del self._fences[next(iter(self._fences))]

    def deliver(self, tgt: Target, message: Completion) -> None:
        if isinstance(tgt, Channel):
            self._queues.push(tgt.name, message.to_json())
            return
        sig = signature(tgt.signature, app=self._app)
        sig.apply_async(args=(message.agent, message.ref, message.outcome),
                        task_id=f"hypha-completion-{message.ref}")

    def relay(self, tgt: Target | None, message: Streamed) -> None:
        """Best effort (stream events, channels only): a failure is logged, never raised;
        a fenced request relays nothing."""
        if not isinstance(tgt, Channel):
            return
        try:
            self._relay(tgt.name, message)
        except Exception as exc:
            log.warning("agent stream relay failed: %s", type(exc).__name__)

    def _relay(self, channel: str, message: Streamed) -> None:
        ref = message.ref
        if self._redis is not None:
            self._relay_script(keys=[_FENCE_PREFIX + ref, _CHANNEL_PREFIX + channel],
                               args=[json.dumps(message.to_json()), _TTL_S])
            return
        with self._lock:
            if ref not in self._fences:
                self._queues.push(channel, message.to_json())

    def receive(self, channel: Channel, timeout: float) -> ChannelMessage | None:
        # a channel carries only what deliver and relay pushed
        return cast(ChannelMessage | None, self._queues.pop(channel.name, timeout))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            close = getattr(self._queues, "close", None)
            if close is not None:
                close()
        if self._redis is not None:
            with contextlib.suppress(Exception):
                self._redis.close()
