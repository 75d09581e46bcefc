"""``run_view``: a run's status, outcome and timing, folded from its events alone.

The status follows hypha's projection rules, in priority order:

1. the last terminal event (``run.completed`` / ``run.failed`` / ``run.cancelled``) wins;
2. otherwise a ``run.waiting_human`` not yet answered by a later ``human.review.approved``,
   ``rejected``, ``expired`` or ``cancelled`` gives ``waiting_human`` (hypha counts only
   approval and rejection; here an expiry also ends the wait: the decision policy runs
   again and decides, as :mod:`hypha_celery.reviews` says);
3. otherwise ``run.started``, or any later sign of execution (a decision, a node, a
   recovery, a model or tool call, a human review, a hold), gives ``running``;
4. otherwise (only ``run.created`` / ``run.queued`` / ``run.cancel.requested``) ``queued``.

A run an operator must look at (``run.quarantined`` or ``run.parked`` and not yet
released or re-driven) keeps hypha's status ``running`` and says why in ``held``; the
store's projection names those two states as statuses of their own. Both say them in
one vocabulary, :class:`~hypha_celery.events.status.RunStatus`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from hypha_celery.events.envelope import TERMINAL_KINDS, Event
from hypha_celery.events.payloads import (
    NodeExecutionScheduled,
    NodeFanoutScheduled,
    RunCancelled,
    RunCompleted,
    RunCreated,
    RunFailed,
)
from hypha_celery.events.status import TERMINAL_STATUSES, RunStatus
from hypha_celery.projections._trace import last_of, run_trace

__all__ = ["STATUSES", "TERMINAL_STATUSES", "Held", "RunError", "RunStatus", "RunView",
           "run_view", "status_of"]

Held = Literal["quarantined", "parked"]
#: The statuses :func:`status_of` gives (a run held is ``running``, see :data:`Held`).
STATUSES: tuple[RunStatus, ...] = (
    RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING_HUMAN, RunStatus.COMPLETED,
    RunStatus.FAILED, RunStatus.CANCELLED)

_REVIEWED = frozenset({"human.review.approved", "human.review.rejected",
                       "human.review.expired", "human.review.cancelled"})
_HOLDS = frozenset({"run.quarantined", "run.released", "run.parked", "run.redriven"})
_SCHEDULED = frozenset({"node.execution.scheduled", "node.fanout.scheduled"})
#: Kinds that only happen once a run executes (beyond ``run.started`` itself).
_EXECUTION_PREFIXES = ("decision.", "node.", "recovery.", "model.call.", "tool.", "memory.",
                       "human.review.")
_EXECUTION_KINDS = frozenset({"run.started", "run.waiting_human"}) | _HOLDS


class RunError(BaseModel):
    """Why a run failed or was cancelled: the terminal event's reason and message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str
    message: str = ""


class RunView(BaseModel):
    """One run as hypha projects it. ``output`` is the ``run.completed`` result (the
    run's answer: print it only where the run's data may be shown); ``steps`` the
    highest step scheduled; ``duration`` runs from ``run.started`` to the terminal
    event (``None`` while running, or for a run that ended before it started)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    graph_id: str | None
    user_id: str | None
    session_id: str | None
    status: RunStatus
    held: Held | None = None
    cancel_requested: bool = False
    output: Any = None
    error: RunError | None = None
    steps: int = 0
    events: int
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    updated_at: float
    duration: float | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES


def run_view(events: Iterable[Event]) -> RunView:
    """The view of one run from its events (any order; ``ValueError`` when empty or
    mixed). Pure: the same events always give the same view."""
    trace = run_trace(events)
    created = last_of(trace, ("run.created",))
    owner = created.body_as(RunCreated) if created is not None else None
    first, end = trace[0], last_of(trace, TERMINAL_KINDS)
    started = next((e.timestamp for e in trace if e.type == "run.started"), None)
    return RunView(
        run_id=first.run_id,
        graph_id=(owner.graph_id if owner else None) or first.agent_id,
        user_id=owner.user_id if owner else first.user_id,
        session_id=owner.session_id if owner else first.session_id,
        status=status_of(trace),
        held=_held(trace),
        cancel_requested=any(e.type == "run.cancel.requested" for e in trace),
        output=end.body_as(RunCompleted).result if end and end.type == "run.completed" else None,
        error=_error(end),
        steps=max((_step(e) for e in trace if e.type in _SCHEDULED), default=0),
        events=len(trace),
        created_at=(created or first).timestamp,
        started_at=started,
        ended_at=end.timestamp if end else None,
        updated_at=trace[-1].timestamp,
        duration=end.timestamp - started if end and started is not None else None,
    )


def _step(scheduled: Event) -> int:
    body = scheduled.body
    assert isinstance(body, NodeExecutionScheduled | NodeFanoutScheduled)
    return int(body.step or 0)


def status_of(trace: Sequence[Event]) -> RunStatus:
    """hypha's status of a run whose events ``trace`` holds in ``seq`` order (one of
    :data:`STATUSES`)."""
    end = last_of(trace, TERMINAL_KINDS)
    if end is not None:
        return _TERMINAL_STATUS[end.type]
    if _awaits_human(trace):
        return RunStatus.WAITING_HUMAN
    if any(_executing(e.type) for e in trace):
        return RunStatus.RUNNING
    return RunStatus.QUEUED


_TERMINAL_STATUS: dict[str, RunStatus] = {
    "run.completed": RunStatus.COMPLETED, "run.failed": RunStatus.FAILED,
    "run.cancelled": RunStatus.CANCELLED}


def _awaits_human(trace: Sequence[Event]) -> bool:
    last = last_of(trace, _REVIEWED | {"run.waiting_human"})
    return last is not None and last.type == "run.waiting_human"


def _executing(kind: str) -> bool:
    return kind in _EXECUTION_KINDS or kind.startswith(_EXECUTION_PREFIXES)


def _held(trace: Sequence[Event]) -> Held | None:
    last = last_of(trace, _HOLDS | TERMINAL_KINDS)
    if last is None or last.type not in ("run.quarantined", "run.parked"):
        return None
    return "quarantined" if last.type == "run.quarantined" else "parked"


def _error(end: Event | None) -> RunError | None:
    if end is None or end.type == "run.completed":
        return None
    body = end.body
    assert isinstance(body, RunFailed | RunCancelled)
    return RunError(reason=str(body.reason or _TERMINAL_STATUS[end.type]),
                    message=str(body.message or ""))
