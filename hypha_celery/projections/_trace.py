"""One run's trace: its events checked to belong to one run and put in ``seq`` order."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from hypha_celery.events.envelope import Event

__all__ = ["last_of", "run_trace"]


def run_trace(events: Iterable[Event]) -> list[Event]:
    """``events`` in ``seq`` order. ``ValueError`` if there are none or they are the
    events of more than one run (a projection is a function of one run's log)."""
    trace = sorted(events, key=lambda e: e.seq)
    if not trace:
        raise ValueError("a run projection needs at least one event")
    run_ids = {e.run_id for e in trace}
    if len(run_ids) > 1:
        raise ValueError(f"events of {len(run_ids)} runs given; a run projection takes one")
    return trace


def last_of(trace: Sequence[Event], kinds: Collection[str]) -> Event | None:
    """The newest event of one of ``kinds``."""
    return next((e for e in reversed(trace) if e.type in kinds), None)
