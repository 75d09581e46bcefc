"""``hypha events --follow``: poll the store for new events until the run ends, and between
two polls print the run's live items (its model calls' tokens) as they arrive."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from hypha_celery.events import TERMINAL_KINDS, Event
from hypha_celery.live import LiveItem, Subscription
from hypha_celery.store import EventStore

POLL = 0.2


def follow(
    store: EventStore, run_id: str, *, poll: float = POLL, timeout: float | None = None,
    sleep: Callable[[float], None] = time.sleep, live: Subscription | None = None,
) -> Iterator[Event | LiveItem]:
    """Yield the run's events as they are recorded, oldest first, and stop after
    its terminal event (or when ``timeout`` seconds pass). With ``live`` (the run's
    subscription, taken before the first read so nothing falls between), the live items
    that arrive while it waits for the next poll are yielded too, interleaved in
    arrival order; without it (or once it ended) it sleeps between polls."""
    end = None if timeout is None else time.monotonic() + timeout
    after = 0
    while True:
        batch = store.events(run_id, after_seq=after)
        for event in batch:
            after = event.seq
            yield event
            if event.kind in TERMINAL_KINDS:
                return
        if end is not None and time.monotonic() >= end:
            return
        if batch:
            continue
        if live is None or live.closed:
            sleep(poll)
        else:
            yield from _arriving(live, poll)


def _arriving(live: Subscription, seconds: float) -> Iterator[LiveItem]:
    """Live items that arrive within ``seconds`` (fewer if the stream ends)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        item = live.get(left)
        if item is None:
            return
        yield item


class LiveLines:
    """Live items for people: ``text`` deltas continue one line (``> Hello wor...``),
    any other item gets a short line of its own (``~ tool_use kb_search``), never its
    payload beyond short scalar fields."""

    def __init__(self, echo: Callable[..., Any], *, indent: str = "    ") -> None:
        self._echo = echo
        self._indent = indent
        self._open = False

    def item(self, item: LiveItem) -> None:
        kind = item.get("kind")
        if kind == "text":
            if not self._open:
                self._echo(f"{self._indent}> ", nl=False)
                self._open = True
            self._echo(str(item.get("text", "")), nl=False)
            return
        self.close_line()
        self._echo(f"{self._indent}~ {kind}{_fields(item)}")

    def close_line(self) -> None:
        """End a line of text deltas (before any other output)."""
        if self._open:
            self._echo("")
            self._open = False


def _fields(item: LiveItem) -> str:
    shown = [f"{k}={v}" for k, v in item.items()
             if k != "kind" and isinstance(v, str | int | float) and len(str(v)) <= 60]
    return (" " + " ".join(shown)) if shown else ""
