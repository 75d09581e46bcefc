"""The in-process live bus (the embedded default: the worker thread and the watchers share
one process)."""

from __future__ import annotations

import threading

from hypha_celery.live._bus import LiveBounds, LiveBus, LiveItem, log, shape
from hypha_celery.live._queue import Subscription


class MemoryLiveBus(LiveBus):
    """Fans items out to the subscriptions of this process, synchronously: ``publish``
    costs a lock and, when someone watches the topic, one JSON encoding plus a queue append
    per watcher. Same bounds and items as the Redis bus."""

    def __init__(self, bounds: LiveBounds | None = None) -> None:
        self.bounds = bounds or LiveBounds()
        self._lock = threading.Lock()
        self._topics: dict[str, tuple[Subscription, ...]] = {}

    def publish(self, topic: str, item: LiveItem) -> None:
        watchers = self._topics.get(topic)
        if not watchers:
            return  # nobody watches: nothing to encode
        try:
            for payload in shape(item, self.bounds.max_item_bytes):
                for sub in watchers:
                    sub.offer(payload)
        except Exception as exc:  # never into the producer
            log.warning("live publish failed: %s", type(exc).__name__)

    def subscribe(self, topic: str, *, timeout: float | None = None) -> Subscription:
        sub = Subscription(self.bounds, timeout=timeout,
                           on_close=lambda s: self._remove(topic, s))
        with self._lock:
            self._topics[topic] = (*self._topics.get(topic, ()), sub)
        return sub

    def _remove(self, topic: str, sub: Subscription) -> None:
        with self._lock:
            rest = tuple(s for s in self._topics.get(topic, ()) if s is not sub)
            if rest:
                self._topics[topic] = rest
            else:
                self._topics.pop(topic, None)
