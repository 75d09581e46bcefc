"""Gate channels: how a ``MockBackend.gate`` script and a test meet, in one process or
across processes.

A channel is a set of named token queues: ``push(key, payload)`` adds a token,
``pop(key, timeout)`` takes the oldest one (waiting up to ``timeout`` seconds) or returns
None. A gate pushes to ``<tag>:blocked`` and pops ``<tag>:release``; the test pops the first
(``MockBackend.wait_blocked``) and pushes the second (``MockBackend.release``). A release
sent before the stream reaches the gate is kept, so the order of the two does not matter.

:func:`gate_channel` picks the implementation: Redis when ``HYPHA_MOCK_GATE_URL`` is set
(lists ``hypha:mock-gate:<tag>:blocked|release``, ``RPUSH`` / ``BLPOP``, expiring after an
hour), else one process-wide in-memory channel (threads).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any, Protocol

GATE_URL_ENV = "HYPHA_MOCK_GATE_URL"
#: What a gate channel carries: a JSON object (sent as JSON between processes).
GateMessage = Mapping[str, object]  # one JSON message of a gate channel
_KEY_TTL_S = 3600


class GateChannel(Protocol):
    def push(self, key: str, payload: GateMessage) -> None: ...

    def pop(self, key: str, timeout: float) -> GateMessage | None: ...


class InProcessGateChannel:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queues: defaultdict[str, deque[GateMessage]] = defaultdict(deque)

    def push(self, key: str, payload: GateMessage) -> None:
        with self._cond:
            self._queues[key].append(payload)
            self._cond.notify_all()

    def pop(self, key: str, timeout: float) -> GateMessage | None:
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._cond:
            while not self._queues.get(key):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            payload = self._queues[key].popleft()
            if not self._queues[key]:
                del self._queues[key]
            return payload


#: Seconds one BLPOP of :class:`RedisGateChannel` blocks at most.
_BLOCK_S = 1.0


class RedisGateChannel:
    def __init__(self, url: str, prefix: str = "hypha:mock-gate:") -> None:
        import redis

        self._client = redis.Redis.from_url(url)
        self._prefix = prefix

    def _key(self, key: str) -> str:
        return f"{self._prefix}{key}"

    def push(self, key: str, payload: GateMessage) -> None:
        with self._client.pipeline() as pipe:
            pipe.rpush(self._key(key), json.dumps(payload))
            pipe.expire(self._key(key), _KEY_TTL_S)
            pipe.execute()

    def pop(self, key: str, timeout: float) -> GateMessage | None:
        raw: Any = self._client.lpop(self._key(key))
        end = time.monotonic() + timeout
        while raw is None and (left := end - time.monotonic()) > 0:
            # BLPOP in slices shorter than the client's socket timeout (5 s in redis-py
            # 8): a longer one is cut off as a TimeoutError by the client itself
            wait = min(max(left, 0.01), _BLOCK_S)  # never 0: BLPOP 0 blocks for ever
            item = self._client.blpop([self._key(key)], timeout=wait)
            raw = None if item is None else item[1]
        return None if raw is None else dict(json.loads(raw))

    def close(self) -> None:
        self._client.close()


_local = InProcessGateChannel()
_redis: dict[str, RedisGateChannel] = {}
_redis_lock = threading.Lock()


def gate_channel() -> GateChannel:
    """The channel for this process, chosen by ``HYPHA_MOCK_GATE_URL`` at call time."""
    url = os.environ.get(GATE_URL_ENV)
    if not url:
        return _local
    with _redis_lock:
        if url not in _redis:
            _redis[url] = RedisGateChannel(url)
        return _redis[url]
