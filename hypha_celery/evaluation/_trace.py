"""Trace completeness: is a run's event log whole?

Checks, in order: the envelope (at least one event; each with an id, a known type, the
evaluated run's id and a finite timestamp), the required event types, a terminal run
event once the run started, and lifecycle pairs. A pair is matched by ``correlation_id``
(the execution id of a node, the call id of a model / tool call, the review id of a human
review): every start must be followed, later in the log, by one of its terminals with the
same correlation id. hypha pairs by run and step only, so two starts in one step could
share one terminal; here they cannot.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from hypha_celery.evaluation._results import Check, EvaluationResult, result
from hypha_celery.events.envelope import KINDS, Event, derived_alone

#: start type -> the types that close it
LIFECYCLE_PAIRS: dict[str, tuple[str, ...]] = {
    "node.execution.started": ("node.execution.completed", "node.execution.failed",
                               "node.execution.late_result", "node.execution.retrying"),
    "model.call.started": ("model.call.completed", "model.call.failed"),
    "tool.call.started": ("tool.call.completed", "tool.call.failed", "tool.call.rejected"),
    "human.review.requested": ("human.review.approved", "human.review.rejected",
                               "human.review.expired", "human.review.cancelled"),
}
#: Once ``run.started`` is in the log, one of these must be too.
RUN_ENDS = ("run.completed", "run.failed", "run.cancelled", "run.waiting_human")


class TraceSpec(BaseModel):
    """What a complete trace must hold: ``event_types`` (each at least once), a terminal
    run event (``require_terminal_run``) and closed lifecycle pairs
    (``enforce_lifecycle_pairs``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = "trace.completeness"
    event_types: list[str] = []
    require_terminal_run: bool = True
    enforce_lifecycle_pairs: bool = True


def correlation(event: Event) -> str:
    """The event's ``correlation_id``, or (for a hand-built event without one) the same
    rule the envelope uses: call id, review id, execution id, else the run id."""
    if event.correlation_id:
        return event.correlation_id
    derived = str(derived_alone(event)[6])
    if derived == event.run_id and event.execution_id:  # the payload has none
        return event.execution_id
    return derived


def _envelope(events: Sequence[Event], run_id: str | None) -> list[Check]:
    checks: list[Check] = []
    if not events:
        checks.append(Check(id="trace.events.present", passed=False,
                            message="the trace has no events"))
    for i, e in enumerate(events):
        where = f"event[{i}]"
        if not e.id:
            checks.append(Check(id=f"{where}.id", passed=False, message=f"{where} has no id"))
        if e.type not in KINDS:
            checks.append(Check(id=f"{where}.type", passed=False,
                                message=f"{where} has an unknown type {e.type!r}"))
        if not e.run_id:
            checks.append(Check(id=f"{where}.run_id", passed=False,
                                message=f"{where} has no run id"))
        elif run_id is not None and e.run_id != run_id:
            checks.append(Check(id=f"{where}.run_id.matches", passed=False,
                                message=f"{where} belongs to run {e.run_id}, not {run_id}",
                                expected=run_id, actual=e.run_id))
        if not isinstance(e.timestamp, int | float) or not math.isfinite(e.timestamp):
            checks.append(Check(id=f"{where}.timestamp", passed=False,
                                message=f"{where} has no finite timestamp"))
    return checks


def _required(events: Sequence[Event], required: Iterable[str]) -> list[Check]:
    present = {e.type for e in events}
    return [Check(id=f"trace.required.{t}", passed=False, expected=t,
                  message=f"the trace has no {t} event")
            for t in dict.fromkeys(required) if t not in present]


def _terminal(events: Sequence[Event]) -> list[Check]:
    types = {e.type for e in events}
    if "run.started" not in types or types.intersection(RUN_ENDS):
        return []
    return [Check(id="trace.run.terminal", passed=False,
                  message="run.started without run.completed / failed / cancelled / "
                          "waiting_human")]


def _pairs(events: Sequence[Event]) -> list[Check]:
    checks: list[Check] = []
    closed: set[tuple[str, str]] = set()  # (start type, correlation) closed later on
    for e in reversed(events):  # one pass from the end: what is closed *after* each start
        for start, ends in LIFECYCLE_PAIRS.items():
            if e.type in ends:
                closed.add((start, correlation(e)))
        if e.type in LIFECYCLE_PAIRS and (e.type, correlation(e)) not in closed:
            checks.append(Check(
                id=f"trace.lifecycle.{e.id}", passed=False, expected=list(LIFECYCLE_PAIRS[e.type]),
                message=f"{e.type} {e.id} (correlation {correlation(e)}) has no later "
                        f"{' / '.join(LIFECYCLE_PAIRS[e.type])}"))
    checks.reverse()
    return checks


def evaluate_trace(events: Sequence[Event], spec: TraceSpec | None = None, *,
                   run_id: str | None = None, required: Iterable[str] = (),
                   evaluation_id: str | None = None) -> EvaluationResult:
    """Trace completeness of ``events`` (in log order). Required types are
    ``spec.event_types`` plus ``required``. When nothing fails the result holds one passed
    check, ``trace.complete``. Check ids: ``trace.events.present``, ``event[i].id`` /
    ``.type`` / ``.run_id`` / ``.run_id.matches`` / ``.timestamp``,
    ``trace.required.<type>``, ``trace.run.terminal``, ``trace.lifecycle.<event id>``."""
    spec = spec or TraceSpec()
    checks = _envelope(events, run_id)
    checks += _required(events, [*spec.event_types, *required])
    if spec.require_terminal_run:
        checks += _terminal(events)
    if spec.enforce_lifecycle_pairs:
        checks += _pairs(events)
    if not checks:
        checks = [Check(id="trace.complete", passed=True,
                        message=f"{len(events)} events, nothing missing")]
    return result(evaluation_id or spec.id, "trace_completeness", checks, run_id)
