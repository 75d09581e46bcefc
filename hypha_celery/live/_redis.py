"""The Redis live bus: ``PUBLISH`` on ``<prefix><topic>`` (default prefix
``hypha:live:<db>:``, ``<db>`` the URL's database number), watched through one pub/sub
connection per process.

Publishing: ``publish`` encodes the item (splitting or truncating it, see
:class:`~hypha_celery.live.LiveBounds`) and appends it to a bounded outbox; one
background thread sends the outbox to Redis, everything queued at that moment in one
pipelined round trip. The producer (a model stream) never waits on the network and never
sees an error: a failed send is logged by its type (at most every few seconds) and its
items are lost.

Watching: every subscription of a process shares one pub/sub connection and one reader
thread, which moves each message into the subscriptions' bounded queues (so Redis never
buffers for a slow watcher: the watcher loses items locally and gets a ``gap``).
``subscribe`` returns once Redis confirmed the channel, so every item published after it
returns is seen. A dropped connection is re-established by redis-py (channels
re-subscribed); watchers get ``{"kind": "gap", "lost": null}`` for the outage. With Redis
down, ``subscribe`` logs and returns a subscription that sees nothing (it ends at its
timeout).

Pub/sub is not scoped to the Redis database number, so the default prefix carries it:
applications on different databases of one server do not see each other's items (pass
``prefix`` to separate more, e.g. tests).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from hypha_celery.live._bus import (
    LiveBounds,
    LiveBus,
    LiveItem,
    encode,
    gap_item,
    is_end,
    log,
    shape,
)
from hypha_celery.live._queue import Subscription
from hypha_celery.middleware._process import on_fork

PREFIX = "hypha:live:"
#: How long ``subscribe`` waits for Redis to confirm a channel.
CONFIRM_TIMEOUT = 2.0
_LOG_EVERY = 5.0  # seconds between two warnings of the same failure


class RedisLiveBus(LiveBus):
    """Live items through Redis pub/sub (see the module docstring)."""

    def __init__(self, url: str, *, prefix: str | None = None,
                 bounds: LiveBounds | None = None, connect_timeout: float = 2.0) -> None:
        self.bounds = bounds or LiveBounds()
        self._client = redis.Redis.from_url(
            url, socket_connect_timeout=connect_timeout, socket_timeout=5.0,
            retry=Retry(NoBackoff(), 0), health_check_interval=0)
        if prefix is None:
            prefix = f"{PREFIX}{self._client.connection_pool.connection_kwargs.get('db', 0)}:"
        self.prefix = prefix
        self._outbox = _Outbox(self._client, self.bounds)
        self._hub = _Hub(self._client)
        on_fork(self._after_fork)

    def _after_fork(self) -> None:
        """A forked child (a prefork pool worker) has none of the parent's threads."""
        self._outbox = _Outbox(self._client, self.bounds)
        self._hub = _Hub(self._client)

    def channel(self, topic: str) -> bytes:
        return (self.prefix + topic).encode()

    def publish(self, topic: str, item: LiveItem) -> None:
        try:
            payloads = shape(item, self.bounds.max_item_bytes)
            if payloads:
                self._outbox.put(self.channel(topic), payloads)
        except Exception as exc:  # never into the producer
            log.warning("live publish failed: %s", type(exc).__name__)

    def subscribe(self, topic: str, *, timeout: float | None = None) -> Subscription:
        channel, hub = self.channel(topic), self._hub
        sub = Subscription(self.bounds, timeout=timeout,
                           on_close=lambda s: hub.remove(channel, s))
        hub.add(channel, sub)
        return sub

    def flush(self, timeout: float = 1.0) -> bool:
        """Wait until everything published so far was sent; False after ``timeout``."""
        return self._outbox.flush(timeout)

    def close(self) -> None:
        self._outbox.close(timeout=1.0)
        self._hub.close()
        self._client.close()


#: How long the sender thread gathers items after a send (see ``_Outbox._run``).
LINGER_S = 0.002
#: The most bytes of items one PUBLISH carries (see ``_frames``).
FRAME_BYTES = 262_144


class _Outbox:
    """Published items waiting for the sender thread, bounded (``outbox_*``)."""

    def __init__(self, client: Any, bounds: LiveBounds) -> None:
        self._client = client
        self._max_items = bounds.outbox_items
        self._max_bytes = bounds.outbox_bytes
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[tuple[bytes, bytes]] = deque()
        self._bytes = 0
        self._lost: dict[bytes, int] = {}  # per channel, told by a gap before its next item
        self._sending = False
        self._closing = False
        self._thread: threading.Thread | None = None
        self._logged = 0.0

    def put(self, channel: bytes, payloads: list[bytes]) -> None:
        with self._cond:
            if self._closing:
                return
            for payload in payloads:
                self._put(channel, payload)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hypha-live-publish",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def _put(self, channel: bytes, payload: bytes) -> None:
        if (len(self._queue) >= self._max_items or self._bytes + len(payload) > self._max_bytes
                ) and not is_end(payload):
            self._lost[channel] = self._lost.get(channel, 0) + 1
            return
        if self._lost and channel in self._lost:
            gap = encode(gap_item(self._lost.pop(channel)))
            self._queue.append((channel, gap))
            self._bytes += len(gap)
        self._queue.append((channel, payload))
        self._bytes += len(payload)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closing)
                if not self._queue:
                    return  # closing, and everything was sent
                batch = list(self._queue)
                self._queue.clear()
                self._bytes = 0
                self._sending = True
            self._send(batch)
            with self._cond:
                self._sending = False
                self._cond.notify_all()
                # Linger: what arrives in the next LINGER_S goes out as one batch, so a
                # dense stream costs one wake-up and one round trip per batch, not per
                # item (an item waits at most LINGER_S more; an idle bus sends at once).
                self._cond.wait_for(lambda: self._closing, LINGER_S)

    def _send(self, batch: list[tuple[bytes, bytes]]) -> None:
        try:
            frames = _frames(batch)
            if len(frames) == 1:
                self._client.publish(*frames[0])
                return
            pipe = self._client.pipeline(transaction=False)
            for channel, frame in frames:
                pipe.publish(channel, frame)
            pipe.execute()
        except Exception as exc:  # the thread must survive anything
            now = time.monotonic()
            if now - self._logged > _LOG_EVERY:
                self._logged = now
                log.warning("live publish failed, %d items lost: %s", len(batch),
                            type(exc).__name__)

    def flush(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._sending, timeout)

    def close(self, timeout: float) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)


def _frames(batch: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Consecutive items of one channel joined by newlines into one message of at most
    ``FRAME_BYTES`` (an item's JSON never holds a raw newline): a dense stream costs one
    PUBLISH per batch, not per item."""
    frames: list[tuple[bytes, bytes]] = []
    channel: bytes | None = None
    run: list[bytes] = []
    size = 0
    for ch, payload in batch:
        if ch != channel or size + len(payload) > FRAME_BYTES:
            if run:
                frames.append((channel, b"\n".join(run)))  # type: ignore[arg-type]
            channel, run, size = ch, [], 0
        run.append(payload)
        size += len(payload) + 1
    if run:
        frames.append((channel, b"\n".join(run)))  # type: ignore[arg-type]
    return frames


class _Hub:
    """The process's pub/sub connection, its reader thread and the subscriptions by
    channel."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._topics: dict[bytes, tuple[Subscription, ...]] = {}
        self._ready: dict[bytes, threading.Event] = {}
        self._pubsub: Any = None
        self._thread: threading.Thread | None = None
        self._closing = False

    def add(self, channel: bytes, sub: Subscription) -> None:
        with self._lock:
            group = self._topics.get(channel, ())
            self._topics[channel] = (*group, sub)
            ready = self._ready.get(channel) if group else None
            if ready is None:
                ready = self._ready[channel] = threading.Event()
                if not self._listen(channel):
                    self._topics.pop(channel, None)
                    self._ready.pop(channel, None)
                    return
        if not ready.wait(CONFIRM_TIMEOUT):
            log.warning("live subscription not confirmed by Redis within %.1fs",
                        CONFIRM_TIMEOUT)

    def _listen(self, channel: bytes) -> bool:
        """SUBSCRIBE (under the lock); False when Redis cannot be reached."""
        try:
            if self._pubsub is None:
                self._pubsub = self._client.pubsub()
            self._pubsub.subscribe(channel)
        except Exception as exc:
            log.warning("live subscribe failed: %s", type(exc).__name__)
            return False  # the next subscribe reconnects
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, args=(self._pubsub,),
                                            name="hypha-live-read", daemon=True)
            self._thread.start()
        return True

    def _drop_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception as exc:
                log.debug("live pubsub close failed: %s", type(exc).__name__)

    def remove(self, channel: bytes, sub: Subscription) -> None:
        with self._lock:
            rest = tuple(s for s in self._topics.get(channel, ()) if s is not sub)
            if rest:
                self._topics[channel] = rest
                return
            if self._topics.pop(channel, None) is None or self._closing:
                return
            self._ready.pop(channel, None)
            try:
                self._pubsub.unsubscribe(channel)
            except Exception as exc:  # re-subscribed on reconnect at worst: harmless
                log.debug("live unsubscribe failed: %s", type(exc).__name__)

    def _run(self, pubsub: Any) -> None:
        broken = False
        while not self._closing:
            try:
                message = pubsub.get_message(timeout=1.0)
            except Exception as exc:
                if self._closing:
                    return
                if not broken:
                    log.warning("live subscriptions lost Redis: %s", type(exc).__name__)
                    self._lose_all()
                broken = True
                time.sleep(0.1)
                continue
            broken = False
            if message is not None:
                self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind, channel = message["type"], message["channel"]
        if kind == "message":
            payloads = message["data"].split(b"\n")  # a frame of items (see _frames)
            for sub in self._topics.get(channel, ()):
                for payload in payloads:
                    sub.offer(payload)
        elif kind == "subscribe":
            ready = self._ready.get(channel)
            if ready is not None:
                ready.set()

    def _lose_all(self) -> None:
        for group in list(self._topics.values()):
            for sub in group:
                sub.lose(None)

    def close(self) -> None:
        """Close the watchers and the connection; the reader thread (a daemon) sees it
        within a second and exits (not joined: it may be waiting for a subscription)."""
        with self._lock:
            self._closing = True
            subs = [s for group in self._topics.values() for s in group]
            self._topics.clear()
            self._drop_pubsub()
        for sub in subs:
            sub.close()
