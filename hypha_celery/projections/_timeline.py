"""The safe, nested reading of a run's events, shared by ``hypha events`` and the console.

:func:`depth` says how deep an event nests -- run (0), step: decisions and schedules (1),
a node or edge execution, its retries and its reducer (2), the model and tool calls it
made (3) -- and :func:`summary` gives the one phrase that describes it. A summary names
nodes, reducers, reasons and durations and never run input, state, node output or error
messages (they may carry prompt text or secrets). :func:`rows` pairs each event with both
and with the duration of a call, measured from its start to its end.

Each summary reads its event's payload model (:attr:`Event.body
<hypha_celery.events.envelope.Event.body>`). A log written elsewhere (an import) may lack
a field this package's writers always write: such an event has no summary (``""``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import cast

from hypha_celery.events import Event
from hypha_celery.events import payloads as ev
from hypha_celery.events.payloads import P, Payload
from hypha_celery.events.view import ErrorJson

__all__ = ["TimelineRow", "depth", "duration", "rows", "summary"]


def _name(node: str | None, execution_id: str | None) -> str:
    """``classify``; a fan-out edge (execution id ``<run>.<step>.<i>``) is ``lookup#i``."""
    name = node or "?"
    parts = (execution_id or "").split(".")
    if len(parts) == 3 and parts[2].isdigit():
        return f"{name}#{parts[2]}"
    return name


def _text(value: object) -> str:
    """``value`` as text, ``""`` for none."""
    return "" if value is None else str(value)


def _counted(names: list[str]) -> str:
    """``["a", "b", "b"]`` -> ``"a, b x2"`` (first-seen order)."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(n if c == 1 else f"{n} x{c}" for n, c in counts.items())


def _error_type(err: ErrorJson | None, default: str) -> str | None:
    """The error's ``type`` (``default`` when it has none); None: no error."""
    if not isinstance(err, Mapping):  # a log written elsewhere may hold anything
        return None
    return str(err.get("type", default))


def _outcome(p: ev.NodeExecutionCompleted | ev.NodeExecutionFailed) -> str:
    failed = _error_type(p.error, "error")
    return _name(p.node_id, p.execution_id) + ("" if failed is None else f"  {failed}")


def _reduced(p: ev.NodeReducerCompleted | ev.NodeReducerFailed) -> str:
    failed = _error_type(p.error, "error")
    return _name(p.reducer, p.execution_id) + ("" if failed is None else f"  {failed}")


def _decision(p: ev.DecisionPolicyRecorded) -> str:
    ids = list(p.node_ids or [])
    if p.type == "next":
        return f"step {p.step}: next {', '.join(ids)}"
    if p.type == "fanout":
        return f"step {p.step}: fan-out {_counted(ids)} -> {p.reducer}"
    return f"step {p.step}: {p.type}"


def _fanout(p: ev.NodeFanoutScheduled) -> str:
    names = ", ".join(f"{e.get('node_id')}#{i}" for i, e in enumerate(p.edges or []))
    return f"{names} -> {p.reducer} (step {p.step})"


def _started(p: ev.NodeExecutionStarted) -> str:
    return _name(p.node_id, p.execution_id) + (f"  attempt {p.attempt}" if p.attempt != 1
                                               else "")


def _by(by: str | None) -> str:
    return f"  by {by}" if by else ""


def _retrying(p: ev.NodeExecutionRetrying) -> str:
    return (f"{_name(p.node_id, p.execution_id)}  attempt {p.attempt} failed "
            f"({_error_type(p.error, '?') or '?'}), retry in {p.delay}s")


def _model_call(p: ev.ModelCallStarted | ev.ModelCallCompleted | ev.ModelCallFailed) -> str:
    failed = _error_type(p.error, "error") if isinstance(p, ev.ModelCallFailed) else None
    return f"{p.model}" + ("" if failed is None else f"  {failed}")


def _tool_call(p: ev.ToolCallStarted | ev.ToolCallCompleted | ev.ToolCallFailed) -> str:
    failed = _error_type(p.error, "error") if isinstance(p, ev.ToolCallFailed) else None
    return f"{p.tool}" + ("" if failed is None else f"  {failed}")


def _verdict(p: ev.ToolPolicyChecked) -> str:
    decision = p.decision
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


_Summary = Callable[[Payload], str]
#: The summary of each type that has one, by its payload model.
_SUMMARIES: dict[str, _Summary] = {}


def _on(model: type[P]) -> Callable[[Callable[[P], str]], None]:
    def register(fn: Callable[[P], str]) -> None:
        _SUMMARIES[model.kind] = cast(_Summary, fn)
    return register


def _nothing(p: Payload) -> str:
    return ""


_on(ev.RunCreated)(lambda p: f"graph {p.graph_id}")
_on(ev.RunQueued)(lambda p: f"behind {p.behind}")
_on(ev.RunStarted)(_nothing)
_on(ev.RunCancelRequested)(_nothing)
_on(ev.RunCompleted)(_nothing)
_on(ev.DecisionPolicyRecorded)(_decision)
_on(ev.NodeExecutionScheduled)(lambda p: f"{p.node_id} (step {p.step})")
_on(ev.NodeFanoutScheduled)(_fanout)
_on(ev.NodeExecutionStarted)(_started)
_on(ev.NodeExecutionCompleted)(_outcome)
_on(ev.NodeExecutionFailed)(_outcome)
_on(ev.NodeReducerCompleted)(_reduced)
_on(ev.NodeReducerFailed)(_reduced)
_on(ev.NodeExecutionLateResult)(lambda p: f"{_name(p.node_id, p.execution_id)}  {p.reason}")
_on(ev.NodeExecutionRetrying)(_retrying)
_on(ev.NodeExecutionRedelivered)(
    lambda p: f"{_name(p.node_id, p.execution_id)}  delivery {p.delivery}")
_on(ev.NodeExecutionDeadLettered)(
    lambda p: f"{_name(p.node_id, p.execution_id)}  {p.reason}")
_on(ev.ModelCallStarted)(_model_call)
_on(ev.ModelCallCompleted)(_model_call)
_on(ev.ModelCallFailed)(_model_call)
_on(ev.ToolCallStarted)(_tool_call)
_on(ev.ToolCallCompleted)(_tool_call)
_on(ev.ToolCallFailed)(_tool_call)
_on(ev.ToolCallRequested)(lambda p: _text(p.tool))
_on(ev.ToolPolicyChecked)(_verdict)
_on(ev.ToolCallApproved)(lambda p: f"{p.tool}  review {p.review_id}")
_on(ev.ToolCallRejected)(lambda p: f"{p.tool}  {p.code}")
_on(ev.FsmStateEntered)(lambda p: _text(p.state))
_on(ev.FsmTransitionAccepted)(lambda p: f"{p.from_} -> {p.to}")
_on(ev.FsmTransitionRejected)(lambda p: f"{p.from_} -> {p.to}  {p.reason}")
_on(ev.HumanReviewRequested)(lambda p: f"{p.review_id}  {_text(p.reason)}")
_on(ev.HumanReviewApproved)(lambda p: f"{p.review_id}  by {p.by}")
_on(ev.HumanReviewRejected)(lambda p: f"{p.review_id}  by {p.by}")
_on(ev.HumanReviewExpired)(lambda p: _text(p.review_id))
_on(ev.RunWaitingHuman)(lambda p: f"review {p.review_id}")
_on(ev.RecoveryRunRedriven)(lambda p: p.why)
_on(ev.RecoveryDeadLetterRedriven)(lambda p: f"dead letter {p.dead_letter_id}" + _by(p.by))
_on(ev.RunRedriven)(lambda p: f"{p.node_id}  dead letter {p.dead_letter_id}" + _by(p.by))
_on(ev.RunReleased)(lambda p: f"attempt {p.attempt}" + _by(p.by))
_on(ev.RecoveryNodeTimedOut)(lambda p: _name(p.node_id, p.execution_id))
_on(ev.RunFailed)(lambda p: _text(p.reason) + _by(p.by))
_on(ev.RunCancelled)(lambda p: _text(p.reason))


def summary(event: Event) -> str:
    """The safe one-phrase description of ``event`` (no input, state or messages)."""
    fn = _SUMMARIES.get(event.type)
    if fn is None:
        return ""
    try:
        return fn(event.body)
    except AttributeError:  # a field the event lacks (a log written elsewhere)
        return ""


_TIMED = (ev.NodeExecutionCompleted, ev.NodeExecutionFailed, ev.NodeReducerCompleted,
          ev.NodeReducerFailed)


def duration(event: Event) -> float | None:
    """How long ``event``'s execution took, in seconds, as the event says (a node's or a
    reducer's outcome: its ``duration``), else None."""
    if not event.type.startswith(("node.execution.", "node.reducer.")):
        return None
    body = event.body
    took = body.duration if isinstance(body, _TIMED) else None
    return float(took) if isinstance(took, int | float) else None


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
        yield TimelineRow(event, depth(event), summary(event), duration(event))
