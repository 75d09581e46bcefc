"""Helpers of the bus tests: a run with an owner, a clock, messages."""

from __future__ import annotations

import time
import uuid
from typing import Any

from hypha_celery.bus import Bus, Endpoint, Message, Scope, human
from hypha_celery.events.fold import new_view
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def scope() -> Scope:
    """A scope of its own (the PostgreSQL store is shared by the session's tests)."""
    return Scope(f"u{uuid.uuid4().hex[:10]}", "s")


def new_run(store: EventStore, sc: Scope) -> str:
    run_id = uuid.uuid4().hex
    with store.transaction() as tx:
        tx.create(new_view(run_id))
        lifecycle.record(tx, run_id, "run.created",
                         {"graph_id": "g", "input": {}, "lane": None,
                          "user_id": sc.user_id, "session_id": sc.session_id})
    return run_id


def message(sc: Scope, to: Endpoint, **fields: Any) -> Message:
    base: dict[str, Any] = {"type": "note", "user_id": sc.user_id,
                            "session_id": sc.session_id, "from": human(sc.user_id),
                            "to": to, "payload": {"n": 1}}
    return Message.model_validate({**base, **fields})


def trace(store: EventStore, run_id: str) -> list[str]:
    return [e.type for e in store.events(run_id) if e.type.startswith("message.")]


def settled(bus: Bus, message_id: str, timeout: float = 10.0) -> Message | None:
    """The message once it is settled (or as it is after ``timeout``): an agent's
    completion publishes the reply first and acknowledges after, so a reply can be
    read before its request is acknowledged."""
    end = time.monotonic() + timeout
    while True:
        msg = bus.get(message_id)
        if msg is None or msg.status.terminal or time.monotonic() > end:
            return msg
        time.sleep(0.01)
