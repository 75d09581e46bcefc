"""Wake-ups for ``wait()``: Redis pub/sub across machines, a condition in-process.

Wake-ups are hints; the store is always re-read, so a lost message only costs
one polling interval (``POLL_INTERVAL``), and a stray one (a message of a channel the
connection listened to before) one more read.

A waiter's subscription is a Redis connection of its own; after the wait it unsubscribes
and the connection is kept (up to ``IDLE_SUBSCRIBERS`` per process) for the next waiter:
an ask or a ``run.wait()`` does not open and close a connection each."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from hypha_celery.middleware._process import on_fork

POLL_INTERVAL = 0.5
CHANNEL_PREFIX = "hypha:run:"
#: Subscriber connections a process keeps between waits.
IDLE_SUBSCRIBERS = 32


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
        self._idle: list[Any] = []  # unsubscribed PubSubs, kept for the next waiter
        on_fork(self._after_fork)

    def _after_fork(self) -> None:
        """A forked child shares none of its parent's subscriber connections."""
        self._lock = threading.Lock()
        self._idle = []

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._redis.Redis.from_url(self._url)
        return self._client

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for pubsub in idle:
            pubsub.close()
        if self._client is not None:
            self._client.close()
            self._client = None

    def publish(self, run_id: str) -> None:
        with contextlib.suppress(self._redis.RedisError):  # a hint only: waiters poll
            self.client.publish(CHANNEL_PREFIX + run_id, b"1")

    @contextmanager
    def listen(self, run_id: str) -> Iterator[Listener]:
        channel = CHANNEL_PREFIX + run_id
        with self._lock:
            pubsub = self._idle.pop() if self._idle else None
        if pubsub is None:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(channel)
        except self._redis.RedisError:
            pubsub.close()
            yield _Sleeper()  # Redis down: waiters fall back to polling the store
            return
        try:
            yield _RedisListener(pubsub, channel)
        finally:
            self._release(pubsub, channel)

    def _release(self, pubsub: Any, channel: str) -> None:
        """Unsubscribe and keep the connection for the next waiter (closed when the
        process keeps enough, or when Redis failed)."""
        try:
            pubsub.unsubscribe(channel)
        except self._redis.RedisError:
            pubsub.close()
            return
        with self._lock:
            if len(self._idle) < IDLE_SUBSCRIBERS:
                self._idle.append(pubsub)
                return
        pubsub.close()


class _Sleeper:
    def wait(self, timeout: float) -> None:
        time.sleep(timeout)


class _RedisListener:
    def __init__(self, pubsub: Any, channel: str) -> None:
        self._pubsub = pubsub
        self._channel = channel.encode()

    def wait(self, timeout: float) -> None:
        """Until a message on this listener's channel or ``timeout`` (the confirmations
        of (un)subscribing, and messages of channels the connection listened to before,
        are skipped)."""
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            found = self._pubsub.get_message(timeout=left)
            if found is not None and found.get("channel") == self._channel:
                return
