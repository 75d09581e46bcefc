"""Fixtures of governed memory: a manager on each store backend, a fresh user per test
(the PostgreSQL database is the session's: ids are unique), an event recorder."""

from __future__ import annotations

import json
import uuid

import pytest

from hypha_celery.events.payloads import Payload
from hypha_celery.memory import MemoryManager, MemoryScope
from hypha_celery.store import EventStore


class Recorder:
    """The events a call emitted, in order."""

    def __init__(self) -> None:
        self.events: list[Payload] = []

    def __call__(self, payload: Payload) -> None:
        self.events.append(payload)

    @property
    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def text(self) -> str:
        return json.dumps([e.dump() for e in self.events])


@pytest.fixture
def manager(store: EventStore) -> MemoryManager:
    return MemoryManager(store)


@pytest.fixture
def user() -> str:
    return f"u-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def scope(user: str) -> MemoryScope:
    return MemoryScope(user)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()
