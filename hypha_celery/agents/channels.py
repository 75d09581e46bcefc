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
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from celery import Celery, signature
from celery.canvas import Signature

from hypha_celery.backends.gate import GateChannel, InProcessGateChannel, RedisGateChannel
from hypha_celery.errors import AgentSpecError

log = logging.getLogger(__name__)
Target = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Channel:
    name: str

    @classmethod
    def new(cls) -> Channel:
        return cls(uuid.uuid4().hex)


def target(recipient: Channel | Signature | None) -> Target | None:
    """The JSON form of a recipient, validated at call time."""
    if recipient is None:
        return None
    if isinstance(recipient, Channel):
        return {"channel": recipient.name}
    if isinstance(recipient, Signature):
        return {"signature": dict(recipient)}
    raise AgentSpecError(f"a recipient is a Channel or a Celery signature, got "
                         f"{type(recipient).__name__}")


class Transport:
    """Delivers messages to targets for one app."""

    def __init__(self, app: Celery, redis_url: str | None) -> None:
        self._app = app
        self._queues: GateChannel = (RedisGateChannel(redis_url, "hypha:agent-channel:")
                                     if redis_url else InProcessGateChannel())

    def deliver(self, tgt: Target, message: dict[str, Any]) -> None:
        if "channel" in tgt:
            self._queues.push(tgt["channel"], message)
            return
        if message["type"] != "completion":
            return  # a signature receives the completion only
        sig = signature(tgt["signature"], app=self._app)
        sig.apply_async(args=(message["agent"], message["ref"], message["outcome"]),
                        task_id=f"hypha-completion-{message['ref']}")

    def relay(self, tgt: Target | None, message: dict[str, Any]) -> None:
        """Best effort (stream events): a failure is logged, never raised."""
        if tgt is None:
            return
        try:
            self.deliver(tgt, message)
        except Exception as exc:
            log.warning("agent stream relay failed: %s", type(exc).__name__)

    def receive(self, channel: Channel, timeout: float) -> dict[str, Any] | None:
        return self._queues.pop(channel.name, timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            close = getattr(self._queues, "close", None)
            if close is not None:
                close()
