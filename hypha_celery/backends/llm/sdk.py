"""SDK clients, reused across calls.

Building an SDK client builds an HTTP client (connection pool, TLS context): a few
milliseconds, and a new connection per call. Clients are kept per (key, base URL, timeout),
the 16 most recently used, so calls with the same key share connections. Each of those
holds up to ``SHARDS`` clients, one per group of threads (a thread is given its group on
its first call, in turn): an HTTP connection pool looks at every one of its connections
whenever a request starts or ends, so one pool serving 500 calls at once (an ``io``
worker) costs about a millisecond a call, eight pools an eighth of it; a thread's calls
all go to one client, so a lone caller keeps reusing its connection. Every client is
built with ``max_retries=0``: retries are the caller's (``RetryPolicy`` for graph nodes,
``handle_error`` for agents), which see the normalized error kinds.

The cache is indexed by a SHA-256 of the key, not the key; the client itself holds the key
for as long as it is cached (the SDK needs it for every request). A forked child (a
prefork worker) starts with an empty cache: it must not share its parent's connections.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from hypha_celery.middleware._process import on_fork

__all__ = ["SHARDS", "ClientCache"]

#: SDK clients (connection pools) per key, base URL and timeout, one per group of threads.
SHARDS = 8
Factory = Callable[[str, "str | None", float], Any]


class ClientCache:
    """Thread-safe LRU of SDK clients built by ``factory(key, base_url, timeout)``."""

    def __init__(self, factory: Factory, size: int = 16) -> None:
        self._factory = factory
        self._size = size
        self._clients: OrderedDict[tuple[str, str | None, float], list[Any]] = OrderedDict()
        self._turn = itertools.count()
        self._local = threading.local()
        self._lock = threading.Lock()
        on_fork(self._forget)

    def get(self, key: str, base_url: str | None, timeout: float) -> Any:
        index = (hashlib.sha256(key.encode()).hexdigest(), base_url, float(timeout))
        with self._lock:  # built under the lock: 500 threads starting at once build one
            shards = self._clients.get(index)
            if shards is None:
                shards = self._clients[index] = []
                while len(self._clients) > self._size:
                    self._clients.popitem(last=False)
            self._clients.move_to_end(index)
            slot = self._slot()
            while len(shards) <= slot:  # built on first use of its group
                shards.append(self._factory(key, base_url, float(timeout)))
            return shards[slot]

    def _slot(self) -> int:
        """This thread's group (given in turn on its first call)."""
        slot: int | None = getattr(self._local, "slot", None)
        if slot is None:
            slot = self._local.slot = next(self._turn) % SHARDS
        return slot

    def clear(self) -> None:
        with self._lock:
            self._clients.clear()

    def _forget(self) -> None:
        """In a forked child: drop the parent's clients (a fresh lock: the parent's may
        have been held by another thread at the fork)."""
        self._lock = threading.Lock()
        self._clients = OrderedDict()
        self._turn = itertools.count()
