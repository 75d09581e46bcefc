"""``session_view``: the runs of one (user id, session id), folded from their events.

Runs sharing a user id and a session id form a session and run one at a time, in the
order they were started. hypha's session is ``active`` until a ``session.closed`` event;
hypha-celery records no session events, so a session never closes here: it is
``active`` while one of its runs is queued, running or waiting for a human, and
``idle`` otherwise (no runs yet, or all of them ended). A new run makes an idle session
active again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from hypha_celery.events.envelope import Event
from hypha_celery.projections._run import TERMINAL_STATUSES, RunStatus, RunView, run_view

__all__ = ["SessionRun", "SessionStatus", "SessionView", "StatusCounts", "session_view"]

SessionStatus = Literal["active", "idle"]


class SessionRun(BaseModel):
    """One run of a session: ids, status and timing (never its input or output)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    graph_id: str | None
    status: RunStatus
    created_at: float
    ended_at: float | None = None


class StatusCounts(BaseModel):
    """How many of a session's runs are in each status."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queued: int = 0
    running: int = 0
    waiting_human: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0


class SessionView(BaseModel):
    """A session: its runs oldest first, counts by status, first and last activity
    (the earliest and newest event of any of its runs; ``None`` without runs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user_id: str
    session_id: str
    status: SessionStatus
    runs: tuple[SessionRun, ...] = ()
    counts: StatusCounts = StatusCounts()
    first_activity: float | None = None
    last_activity: float | None = None


def session_view(events: Iterable[Event], user_id: str, session_id: str) -> SessionView:
    """The session ``(user_id, session_id)`` from the events of any number of runs:
    runs owned by another user or session are left out. Pure."""
    views = [v for v in _views(events) if (v.user_id, v.session_id) == (user_id, session_id)]
    views.sort(key=lambda v: v.created_at)  # stable: equal times keep the input's order
    active = any(v.status not in TERMINAL_STATUSES for v in views)
    return SessionView(
        user_id=user_id,
        session_id=session_id,
        status="active" if active else "idle",
        runs=tuple(_run(v) for v in views),
        counts=_counts(views),
        first_activity=min((v.created_at for v in views), default=None),
        last_activity=max((v.updated_at for v in views), default=None),
    )


def _views(events: Iterable[Event]) -> list[RunView]:
    by_run: dict[str, list[Event]] = {}
    for event in events:
        by_run.setdefault(event.run_id, []).append(event)
    return [run_view(trace) for trace in by_run.values()]


def _run(view: RunView) -> SessionRun:
    return SessionRun(run_id=view.run_id, graph_id=view.graph_id, status=view.status,
                      created_at=view.created_at, ended_at=view.ended_at)


def _counts(views: list[RunView]) -> StatusCounts:
    counts: dict[str, int] = {}
    for view in views:
        counts[view.status] = counts.get(view.status, 0) + 1
    return StatusCounts(**counts)
