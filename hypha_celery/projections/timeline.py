"""The safe, nested reading of a run's events, shared by ``hypha events`` and the console.

:func:`depth` says how deep an event nests -- run (0), step: decisions and schedules (1),
a node or edge execution, its retries and its reducer (2), the model and tool calls it
made (3) -- and :func:`summary` gives the one phrase that describes it. A summary names
nodes, reducers, reasons and durations and never run input, state, node output or error
messages (they may carry prompt text or secrets). :func:`rows` pairs each event with both
and with the duration of a call, measured from its start to its end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hypha_celery.events import Event

__all__ = ["TimelineRow", "depth", "rows", "summary"]


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


def _by(d: Mapping[str, Any]) -> str:
    return f"  by {d['by']}" if d.get("by") else ""


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
    "recovery.dead_letter.redriven": lambda d: f"dead letter {d.get('dead_letter_id')}"
                                               + _by(d),
    "run.redriven": lambda d: f"{d.get('node_id')}  dead letter {d.get('dead_letter_id')}"
                              + _by(d),
    "run.released": lambda d: f"attempt {d.get('attempt')}" + _by(d),
    "recovery.node.timed_out": lambda d: _name(d),
    "run.cancel.requested": lambda d: "",
    "run.completed": lambda d: "",
    "run.failed": lambda d: _reason(d) + _by(d),
    "run.cancelled": _reason,
}


def summary(event: Event) -> str:
    """The safe one-phrase description of ``event`` (no input, state or messages)."""
    fn = _SUMMARIES.get(event.kind)
    return fn(event.data) if fn is not None else ""


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One event as a timeline shows it: how deep it nests, its safe summary and how
    long it took (a call's end: since its start; else the event's own ``duration``)."""

    event: Event
    depth: int
    summary: str
    duration: float | None


def rows(events: Iterable[Event]) -> Iterator[TimelineRow]:
    """``events`` (in order) as timeline rows."""
    began: dict[str, float] = {}
    for event in events:
        kind = event.type
        if kind.endswith(".call.started"):
            began[event.correlation_id or ""] = event.ts
        elif kind.startswith(("model.call.", "tool.call.")):
            start = began.pop(event.correlation_id or "", None)
            yield TimelineRow(event, depth(event), summary(event),
                              None if start is None else event.ts - start)
            continue
        duration = event.data.get("duration")
        took = float(duration) if isinstance(duration, int | float) else None
        yield TimelineRow(event, depth(event), summary(event), took)
