"""One line per event, for people: relative time, seq, kind and a short summary.

The summary names nodes, reducers, reasons and durations and never prints run
input, state, node output or error messages (they may carry prompt text or
secrets); ``hypha events --json`` / ``hypha export`` are the raw views.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any

import click

from hypha_celery.events import Event

_COLOURS: dict[str, str] = {
    "run.completed": "green",
    "node.completed": "green",
    "reducer.completed": "green",
    "run.failed": "red",
    "node.failed": "red",
    "reducer.failed": "red",
    "run.cancelled": "yellow",
    "run.cancel_requested": "yellow",
    "node.late_result": "yellow",
    "node.scheduled": "cyan",
    "fanout.scheduled": "cyan",
    "decision.recorded": "blue",
    "node.started": "magenta",
}


def use_colour(stream: IO[str]) -> bool:
    """ANSI colours only on a terminal and only when ``NO_COLOR`` is unset."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _ms(seconds: Any) -> str:
    return f"{float(seconds) * 1000:.1f}ms" if isinstance(seconds, int | float) else ""


def _name(d: Mapping[str, Any]) -> str:
    """``classify``; a fan-out edge (execution id ``<run>.<step>.<i>``) is ``lookup#i``."""
    name = str(d.get("node_id") or d.get("reducer") or "?")
    parts = str(d.get("execution_id", "")).split(".")
    if len(parts) == 3 and parts[2].isdigit():
        return f"{name}#{parts[2]}"
    return name


def _counted(names: list[str]) -> str:
    """``["a", "b", "b"]`` -> ``"a, b x2"`` (first-seen order)."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(n if c == 1 else f"{n} x{c}" for n, c in counts.items())


def _outcome(d: Mapping[str, Any]) -> str:
    parts = [_name(d)]
    err = d.get("error")
    if isinstance(err, Mapping):
        parts.append(str(err.get("type", "error")))
    return "  ".join(parts)


def _decision(d: Mapping[str, Any]) -> str:
    kind, ids = d.get("type"), list(d.get("node_ids") or [])
    if kind == "next":
        return f"step {d.get('step')}: next {', '.join(ids)}"
    if kind == "fanout":
        return f"step {d.get('step')}: fan-out {_counted(ids)} -> {d.get('reducer')}"
    return f"step {d.get('step')}: {kind}"


def _fanout(d: Mapping[str, Any]) -> str:
    edges = d.get("edges") or []
    names = ", ".join(f"{e.get('node_id')}#{i}" for i, e in enumerate(edges))
    return f"{names} -> {d.get('reducer')} (step {d.get('step')})"


def _started(d: Mapping[str, Any]) -> str:
    attempt = d.get("attempt", 1)
    return _name(d) + (f"  attempt {attempt}" if attempt != 1 else "")


def _reason(d: Mapping[str, Any]) -> str:
    return str(d.get("reason", ""))


_SUMMARIES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "run.created": lambda d: f"graph {d.get('graph_id')}",
    "run.queued": lambda d: f"behind {d.get('behind')}",
    "run.started": lambda d: "",
    "decision.recorded": _decision,
    "node.scheduled": lambda d: f"{d.get('node_id')} (step {d.get('step')})",
    "fanout.scheduled": _fanout,
    "node.started": _started,
    "node.completed": _outcome,
    "node.failed": _outcome,
    "reducer.completed": _outcome,
    "reducer.failed": _outcome,
    "node.late_result": lambda d: f"{_name(d)}  {_reason(d)}",
    "run.cancel_requested": lambda d: "",
    "run.completed": lambda d: "",
    "run.failed": _reason,
    "run.cancelled": _reason,
}


def summary(event: Event) -> str:
    """The safe one-phrase description of ``event`` (no input, state or messages)."""
    fn = _SUMMARIES.get(event.kind)
    return fn(event.data) if fn is not None else ""


def format_event(event: Event, t0: float, *, colour: bool = False) -> str:
    """``  +12.3ms   5  node.completed     classify               10.2ms``"""
    rel = f"+{(event.ts - t0) * 1000:.1f}ms".rjust(10)
    kind = f"{event.kind:<20}"
    what = f"{summary(event):<34}"
    duration = _ms(event.data.get("duration"))
    if event.kind in ("run.completed", "run.failed", "run.cancelled"):
        duration = f"total {_ms(event.ts - t0)}"
    if colour:
        rel = click.style(rel, dim=True)
        kind = click.style(kind, fg=_COLOURS.get(event.kind), bold=event.kind.startswith("run."))
        duration = click.style(duration, dim=True) if duration else duration
    return f"{rel} {event.seq:>4}  {kind} {what} {duration}".rstrip()


def timeline(events: Iterable[Event], *, colour: bool = False,
             t0: float | None = None) -> Iterator[str]:
    """Format events in order; times are relative to ``t0`` (default: the first event)."""
    for event in events:
        if t0 is None:
            t0 = event.ts
        yield format_event(event, t0, colour=colour)
