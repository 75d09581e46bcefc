"""Wake-ups for ``wait()``: Redis pub/sub across machines, a condition in-process.

Wake-ups are hints; the store is always re-read, so a lost message only costs
one polling interval (``POLL_INTERVAL``)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

POLL_INTERVAL = 0.5
CHANNEL_PREFIX = "hypha:run:"


class Listener(Protocol):
    def wait(self, timeout: float) -> None: ...


class Notifier(Protocol):
    def publish(self, run_id: str) -> None: ...

    def listen(self, run_id: str) -> Any: ...

    def close(self) -> None: ...


class LocalNotifier:
    """In-process wake-ups (the embedded default)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = 0

    def close(self) -> None:
        return None

    def publish(self, run_id: str) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()

    @contextmanager
    def listen(self, run_id: str) -> Iterator[_LocalListener]:
        yield _LocalListener(self)


class _LocalListener:
    def __init__(self, parent: LocalNotifier) -> None:
        self._parent = parent
        self._seen = parent._version

    def wait(self, timeout: float) -> None:
        with self._parent._cond:
            if self._parent._version == self._seen:
                self._parent._cond.wait(timeout)
            self._seen = self._parent._version


class RedisNotifier:
    """Publishes ``hypha:run:<id>`` on terminal events; ``wait`` subscribes."""

    def __init__(self, url: str) -> None:
        import redis

        self._url = url
        self._client: Any = None
        self._redis = redis
        self._lock = threading.Lock()  # one client (and pool) for every thread

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._redis.Redis.from_url(self._url)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def publish(self, run_id: str) -> None:
        with contextlib.suppress(self._redis.RedisError):  # a hint only: waiters poll
            self.client.publish(CHANNEL_PREFIX + run_id, b"1")

    @contextmanager
    def listen(self, run_id: str) -> Iterator[Listener]:
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(CHANNEL_PREFIX + run_id)
        except self._redis.RedisError:
            pubsub.close()
            yield _Sleeper()  # Redis down: waiters fall back to polling the store
            return
        try:
            yield _RedisListener(pubsub)
        finally:
            pubsub.close()


class _Sleeper:
    def wait(self, timeout: float) -> None:
        time.sleep(timeout)


class _RedisListener:
    def __init__(self, pubsub: Any) -> None:
        self._pubsub = pubsub

    def wait(self, timeout: float) -> None:
        self._pubsub.get_message(timeout=timeout)
