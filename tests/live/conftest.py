"""Each bus test runs on the in-process bus and on Redis pub/sub (a private channel prefix
per bus: pub/sub is not scoped to the claimed database)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from hypha_celery.live import LiveBounds, LiveBus, MemoryLiveBus, RedisLiveBus

MakeBus = Callable[..., LiveBus]


@pytest.fixture(params=["memory", "redis"])
def make_bus(request: pytest.FixtureRequest) -> Iterator[MakeBus]:
    """``make_bus(**bounds)``: a fresh bus of the parametrized kind, closed after the test."""
    made: list[LiveBus] = []
    url = str(request.getfixturevalue("redis_url")) if request.param == "redis" else ""

    def make(**bounds: int) -> LiveBus:
        b = LiveBounds(**bounds)
        bus: LiveBus = MemoryLiveBus(b) if not url else RedisLiveBus(
            url, prefix=f"hypha-test:{uuid.uuid4().hex}:", bounds=b)
        made.append(bus)
        return bus

    yield make
    for bus in made:
        bus.close()
