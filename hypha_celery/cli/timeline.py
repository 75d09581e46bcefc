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
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any

import click

from hypha_celery.events import Event

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


def _retrying(d: Mapping[str, Any]) -> str:
    err = d.get("error")
    kind = err.get("type", "?") if isinstance(err, Mapping) else "?"
    return (f"{_name(d)}  attempt {d.get('attempt')} failed ({kind}), "
            f"retry in {d.get('delay')}s")


def _call(family: str) -> Callable[[Mapping[str, Any]], str]:
    def summary(d: Mapping[str, Any]) -> str:
        err = d.get("error")
        failed = f"  {err.get('type', 'error')}" if isinstance(err, Mapping) else ""
        return f"{d.get(family)}{failed}"
    return summary


def _verdict(decision: Any) -> str:
    if not isinstance(decision, Mapping):
        return ""
    verdict = "allowed" if decision.get("allowed") else "denied"
    return verdict + ("  review required" if decision.get("requires_review") else "")


_EXECUTION = frozenset({
    "node.execution.started", "node.execution.completed", "node.execution.failed",
    "node.execution.retrying", "node.execution.redelivered", "node.execution.dead_lettered",
    "node.execution.late_result", "node.reducer.completed", "node.reducer.failed",
    "recovery.node.timed_out"})


def depth(event: Event) -> int:
    """How deep ``event`` nests: 0 run, 1 step, 2 execution, 3 call."""
    if event.type.startswith(("model.call.", "tool.")):
        return 3
    if event.type in _EXECUTION:
        return 2
    if event.type.startswith(("decision.", "node.", "recovery.", "human.", "message.",
                              "fsm.")):
        return 1
    return 0


_SUMMARIES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "run.created": lambda d: f"graph {d.get('graph_id')}",
    "run.queued": lambda d: f"behind {d.get('behind')}",
    "run.started": lambda d: "",
    "decision.policy.recorded": _decision,
    "node.execution.scheduled": lambda d: f"{d.get('node_id')} (step {d.get('step')})",
    "node.fanout.scheduled": _fanout,
    "node.execution.started": _started,
    "node.execution.completed": _outcome,
    "node.execution.failed": _outcome,
    "node.reducer.completed": _outcome,
    "node.reducer.failed": _outcome,
    "node.execution.late_result": lambda d: f"{_name(d)}  {_reason(d)}",
    "node.execution.retrying": _retrying,
    "node.execution.redelivered": lambda d: f"{_name(d)}  delivery {d.get('delivery', '')}",
    "node.execution.dead_lettered": lambda d: f"{_name(d)}  {_reason(d)}",
    "model.call.started": _call("model"),
    "model.call.completed": _call("model"),
    "model.call.failed": _call("model"),
    "tool.call.started": _call("tool"),
    "tool.call.completed": _call("tool"),
    "tool.call.failed": _call("tool"),
    "tool.call.requested": lambda d: str(d.get("tool", "")),
    "tool.policy.checked": lambda d: _verdict(d.get("decision")),
    "tool.call.approved": lambda d: f"{d.get('tool')}  review {d.get('review_id')}",
    "tool.call.rejected": lambda d: f"{d.get('tool')}  {d.get('code')}",
    "fsm.state.entered": lambda d: str(d.get("state", "")),
    "fsm.transition.accepted": lambda d: f"{d.get('from')} -> {d.get('to')}",
    "fsm.transition.rejected": lambda d: f"{d.get('from')} -> {d.get('to')}  {_reason(d)}",
    "human.review.requested": lambda d: f"{d.get('review_id')}  {_reason(d)}",
    "human.review.approved": lambda d: f"{d.get('review_id')}  by {d.get('by')}",
    "human.review.rejected": lambda d: f"{d.get('review_id')}  by {d.get('by')}",
    "human.review.expired": lambda d: str(d.get("review_id", "")),
    "run.waiting_human": lambda d: f"review {d.get('review_id')}",
    "recovery.run.redriven": _reason,
    "recovery.node.timed_out": lambda d: _name(d),
    "run.cancel.requested": lambda d: "",
    "run.completed": lambda d: "",
    "run.failed": _reason,
    "run.cancelled": _reason,
}


def summary(event: Event) -> str:
    """The safe one-phrase description of ``event`` (no input, state or messages)."""
    fn = _SUMMARIES.get(event.kind)
    return fn(event.data) if fn is not None else ""


def format_event(event: Event, t0: float, *, colour: bool = False, depth: int = 0,
                 duration: float | None = None) -> str:
    """``  +12.3ms   5      node.execution.completed  classify   10.2ms`` (``depth``
    indents the type; ``duration`` in seconds overrides the event's own)."""
    rel = f"+{(event.ts - t0) * 1000:.1f}ms".rjust(10)
    kind = f"{'  ' * depth + event.kind:<34}"
    what = f"{summary(event):<34}"
    took = _ms(event.data.get("duration") if duration is None else duration)
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
    began: dict[str, float] = {}
    for event in events:
        if t0 is None:
            t0 = event.ts
        duration = None
        if event.type.endswith(".call.started"):
            began[event.correlation_id or ""] = event.ts
        elif event.type.startswith(("model.call.", "tool.call.")):
            start = began.pop(event.correlation_id or "", None)
            duration = None if start is None else event.ts - start
        yield format_event(event, t0, colour=colour, depth=depth(event), duration=duration)
