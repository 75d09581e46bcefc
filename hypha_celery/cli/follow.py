"""``hypha events --follow``: poll the store for new events until the run ends."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from hypha_celery.events import TERMINAL_KINDS, Event
from hypha_celery.store import EventStore

POLL = 0.2


def follow(
    store: EventStore, run_id: str, *, poll: float = POLL, timeout: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Event]:
    """Yield the run's events as they are recorded, oldest first, and stop after
    its terminal event (or when ``timeout`` seconds pass)."""
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
        if not batch:
            sleep(poll)
