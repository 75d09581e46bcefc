"""SDK clients, reused across calls.

Building an SDK client builds an HTTP client (connection pool, TLS context): a few
milliseconds, and a new connection per call. Clients are kept per (key, base URL, timeout),
the 16 most recently used, so calls with the same key share connections. Every client is
built with ``max_retries=0``: retries are the caller's (``RetryPolicy`` for graph nodes,
``handle_error`` for agents), which see the normalized error kinds.

The cache is indexed by a SHA-256 of the key, not the key; the client itself holds the key
for as long as it is cached (the SDK needs it for every request). A forked child (a
prefork worker) starts with an empty cache: it must not share its parent's connections.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["ClientCache"]

Factory = Callable[[str, "str | None", float], Any]


class ClientCache:
    """Thread-safe LRU of SDK clients built by ``factory(key, base_url, timeout)``."""

    def __init__(self, factory: Factory, size: int = 16) -> None:
        self._factory = factory
        self._size = size
        self._clients: OrderedDict[tuple[str, str | None, float], Any] = OrderedDict()
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def get(self, key: str, base_url: str | None, timeout: float) -> Any:
        index = (hashlib.sha256(key.encode()).hexdigest(), base_url, float(timeout))
        with self._lock:  # built under the lock: 500 threads starting at once build one
            client = self._clients.get(index)
            if client is None:
                client = self._clients[index] = self._factory(key, base_url, float(timeout))
                while len(self._clients) > self._size:
                    self._clients.popitem(last=False)
            self._clients.move_to_end(index)
        return client

    def clear(self) -> None:
        with self._lock:
            self._clients.clear()

    def _forget(self) -> None:
        """In a forked child: drop the parent's clients (a fresh lock: the parent's may
        have been held by another thread at the fork)."""
        self._lock = threading.Lock()
        self._clients = OrderedDict()
