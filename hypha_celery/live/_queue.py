"""One watcher's subscription: a bounded queue of encoded items that the bus fills (from
any thread) and the watcher drains, with ``gap`` items where items were lost."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from types import TracebackType

from hypha_celery.live._bus import LiveBounds, LiveItem, gap_item, is_end


class _Gap:
    """Where items went missing, and how many (``None``: unknown)."""

    __slots__ = ("lost",)

    def __init__(self) -> None:
        self.lost: int | None = 0


class Subscription(Iterator[LiveItem]):
    """Items of one topic from the moment it was subscribed: iterate it (stops after the
    ``end`` item, which it yields, or after ``timeout`` seconds without an item), or call
    :meth:`get`. Bounded by ``bounds.queue_items`` / ``queue_bytes``: a slow watcher
    loses the newest items and gets one ``{"kind": "gap", "lost": n}`` where they were."""

    def __init__(self, bounds: LiveBounds, *, timeout: float | None = None,
                 on_close: Callable[[Subscription], None] | None = None) -> None:
        self._max_items = bounds.queue_items
        self._max_bytes = bounds.queue_bytes
        self._timeout = timeout
        self._on_close = on_close
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[bytes | _Gap] = deque()
        self._count = 0
        self._bytes = 0
        self._gap: _Gap | None = None  # the open gap: the last entry of the queue
        self._closed = False

    # -- the bus's side --------------------------------------------------------------
    def offer(self, payload: bytes) -> None:
        """Queue one encoded item, or count it lost when the queue is full (an ``end``
        item always fits)."""
        size = len(payload)
        with self._cond:
            if self._closed:
                return
            if (self._count >= self._max_items or self._bytes + size > self._max_bytes) \
                    and not is_end(payload):
                self._open_gap(1)
                return
            self._gap = None
            self._queue.append(payload)
            self._count += 1
            self._bytes += size
            self._cond.notify()

    def lose(self, lost: int | None) -> None:
        """Items went missing before reaching this queue (``None``: how many is unknown)."""
        with self._cond:
            if not self._closed:
                self._open_gap(lost)
                self._cond.notify()

    def _open_gap(self, lost: int | None) -> None:
        gap = self._gap
        if gap is None:
            gap = self._gap = _Gap()
            self._queue.append(gap)
        gap.lost = None if lost is None or gap.lost is None else gap.lost + lost

    # -- the watcher's side ----------------------------------------------------------
    def __len__(self) -> int:
        """Items queued now (gap markers not counted)."""
        return self._count

    @property
    def closed(self) -> bool:
        """Ended (its ``end`` item was taken) or closed: :meth:`get` returns None at once."""
        return self._closed

    def get(self, timeout: float | None = None) -> LiveItem | None:
        """The next item, or None when ``timeout`` seconds pass first or it is closed.
        Taking the ``end`` item closes the subscription."""
        with self._cond:
            if not self._queue and not self._closed:
                self._cond.wait_for(lambda: bool(self._queue) or self._closed, timeout)
            if self._closed or not self._queue:
                return None
            entry = self._queue.popleft()
            if isinstance(entry, _Gap):
                if entry is self._gap:
                    self._gap = None
                return gap_item(entry.lost)
            self._count -= 1
            self._bytes -= len(entry)
        item: LiveItem = json.loads(entry)
        if item["kind"] == "end":
            self.close()
        return item

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> LiveItem:
        item = self.get(self._timeout)
        if item is None:
            self.close()
            raise StopIteration
        return item

    def until_end(self, timeout: float | None = None) -> LiveStream:
        """Its items until the ``end`` item (yielded) or until ``timeout`` seconds have
        passed in all; then it is closed (also when the stream is closed)."""
        return LiveStream(self, self._until_end(timeout))

    def _until_end(self, timeout: float | None) -> Generator[LiveItem, None, None]:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                item = self.get(left)
                if item is None:
                    if self._closed:
                        return
                    continue
                yield item

    def close(self) -> None:
        """Stop receiving (idempotent, any thread); what was queued is dropped."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._queue.clear()
            self._gap = None
            self._cond.notify_all()
        if self._on_close is not None:
            self._on_close(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class LiveStream(Iterator[LiveItem]):
    """What ``RunHandle.stream()`` and ``agents.stream()`` return: the items ``items``
    makes of ``sub``. :meth:`close` (or leaving a ``with`` block) ends both, whether the
    iteration started or not, so an abandoned stream does not keep its subscription."""

    def __init__(self, sub: Subscription, items: Generator[LiveItem, None, None]) -> None:
        self._sub = sub
        self._items = items

    def __iter__(self) -> LiveStream:
        return self

    def __next__(self) -> LiveItem:
        return next(self._items)

    def close(self) -> None:
        self._items.close()
        self._sub.close()

    def __enter__(self) -> LiveStream:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
