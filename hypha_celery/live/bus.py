"""The :class:`LiveBus` interface (Redis pub/sub and in-process implementations live
beside it)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

#: One live item: ``{"kind": "text" | "tool_use" | "usage" | "gap" | "end", ...}`` (JSON).
LiveItem = dict[str, Any]


class LiveBus(ABC):
    @abstractmethod
    def publish(self, topic: str, item: LiveItem) -> None:
        """Fan ``item`` out to the topic's current subscribers; never raises."""

    @abstractmethod
    def subscribe(self, topic: str, *, timeout: float | None = None) -> Iterator[LiveItem]:
        """Items published on ``topic`` from now on, until an ``end`` item, the iterator
        is closed, or ``timeout`` seconds pass without an item."""


class NullBus(LiveBus):
    """Publishes nowhere (no watcher can exist)."""

    def publish(self, topic: str, item: LiveItem) -> None:
        return None

    def subscribe(self, topic: str, *, timeout: float | None = None) -> Iterator[LiveItem]:
        return iter(())
