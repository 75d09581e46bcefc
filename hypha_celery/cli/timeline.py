"""One line per event, for people: relative time, seq, type and a short summary, nested
by what the event belongs to — run (0), step: decisions and schedules (1), a node or edge
execution, its retries and its reducer (2), the model and tool calls it made (3) — with
durations (a node's own, a call's from its start to its end, the run's total).

The summary names nodes, reducers, reasons and durations and never prints run
input, state, node output or error messages (they may carry prompt text or
secrets); ``hypha events --json`` / ``hypha export`` are the raw views.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import IO, Any

import click

from hypha_celery.events import Event
from hypha_celery.projections._timeline import depth, rows, summary
from hypha_celery.projections._timeline import duration as own_duration

__all__ = ["depth", "format_event", "summary", "timeline", "use_colour"]

_COLOURS: dict[str, str] = {
    "run.completed": "green",
    "node.execution.completed": "green",
    "node.reducer.completed": "green",
    "run.failed": "red",
    "node.execution.failed": "red",
    "node.reducer.failed": "red",
    "run.cancelled": "yellow",
    "run.cancel.requested": "yellow",
    "node.execution.late_result": "yellow",
    "node.execution.scheduled": "cyan",
    "node.fanout.scheduled": "cyan",
    "decision.policy.recorded": "blue",
    "node.execution.started": "magenta",
}


def use_colour(stream: IO[str]) -> bool:
    """ANSI colours only on a terminal and only when ``NO_COLOR`` is unset."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _ms(seconds: Any) -> str:
    return f"{float(seconds) * 1000:.1f}ms" if isinstance(seconds, int | float) else ""


def format_event(event: Event, t0: float, *, colour: bool = False, depth: int = 0,
                 duration: float | None = None) -> str:
    """``  +12.3ms   5      node.execution.completed  classify   10.2ms`` (``depth``
    indents the type; ``duration`` in seconds overrides the event's own)."""
    rel = f"+{(event.ts - t0) * 1000:.1f}ms".rjust(10)
    kind = f"{'  ' * depth + event.kind:<34}"
    what = f"{summary(event):<34}"
    took = _ms(own_duration(event) if duration is None else duration)
    if event.kind in ("run.completed", "run.failed", "run.cancelled"):
        took = f"total {_ms(event.ts - t0)}"
    if colour:
        rel = click.style(rel, dim=True)
        kind = click.style(kind, fg=_COLOURS.get(event.kind), bold=event.kind.startswith("run."))
        took = click.style(took, dim=True) if took else took
    return f"{rel} {event.seq:>4}  {kind} {what} {took}".rstrip()


def timeline(events: Iterable[Event], *, colour: bool = False,
             t0: float | None = None) -> Iterator[str]:
    """Format events in order, nested (:func:`depth`); times are relative to ``t0``
    (default: the first event). A call's end shows how long it took."""
    for row in rows(events):
        if t0 is None:
            t0 = row.event.ts
        call = row.event.type.startswith(("model.call.", "tool.call."))
        yield format_event(row.event, t0, colour=colour, depth=row.depth,
                           duration=row.duration if call else None)
