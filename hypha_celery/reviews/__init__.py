"""Human review: a run parked by a ``Review`` decision (``run.waiting_human``) holds no
worker until a person approves or rejects it, or the review expires.

Each action is one transaction on the locked run — the review's event
(``human.review.approved`` / ``rejected`` / ``expired``, which puts the run back to
``running``) — and, after the commit, a coordinator message whose execution id is the
review id: the decision policy runs again and reads the outcome in ``ctx.reviews``. If
that message is lost the recovery supervisor re-drives it like a lost kickoff.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import TypeAdapter

from hypha_celery.errors import NoPendingReview, RunNotFound
from hypha_celery.events import RunStatus, View
from hypha_celery.events import payloads as ev
from hypha_celery.events.view import ReviewDoc
from hypha_celery.runtime import canvas
from hypha_celery.runtime.core import Runtime
from hypha_celery.store import EventStore

__all__ = ["PendingReview", "approve", "expire_due", "pending", "pending_for", "reject"]

#: Bounds on what a reviewer's words may add to the log.
MAX_BY_CHARS = 200
MAX_REASON_CHARS = 2_000


@dataclass(frozen=True, slots=True)
class PendingReview:
    """One run waiting for a human: what is asked (``reason``, ``subject``) and until when."""

    run_id: str
    review_id: str
    graph_id: str
    reason: str | None
    subject: Any
    requested_step: int | None
    expires_at: float | None
    user_id: str | None
    session_id: str | None

    def to_json(self) -> dict[str, object]:
        """Every field, in order (``hypha review list --json``)."""
        json: dict[str, object] = _PENDING.dump_python(self)
        return json


_PENDING = TypeAdapter(PendingReview)


def pending(store: EventStore, limit: int = 100) -> list[PendingReview]:
    """Runs waiting for a human, oldest first, with their pending review."""
    found = (_pending_review(view) for view in store.by_status(RunStatus.WAITING_HUMAN, limit))
    return [r for r in found if r is not None]


def pending_for(store: EventStore, run_id: str) -> PendingReview | None:
    """The pending review of run ``run_id`` (one run read), or None."""
    view = store.load(run_id)
    return None if view is None else _pending_review(view)


def approve(rt: Runtime, run_id: str, *, by: str, note: str = "",
            review_id: str | None = None) -> str:
    """Approve the run's pending review; the run goes on. Returns the review id."""
    return _decide(rt, run_id, review_id, lambda found, at: ev.HumanReviewApproved(
        review_id=found, by=by[:MAX_BY_CHARS], note=note[:MAX_REASON_CHARS], at=at))


def reject(rt: Runtime, run_id: str, *, by: str, reason: str,
           review_id: str | None = None) -> str:
    """Reject the run's pending review; the policy decides what follows (a workflow
    ends ``run.failed``, reason ``review_rejected``). Returns the review id."""
    return _decide(rt, run_id, review_id, lambda found, at: ev.HumanReviewRejected(
        review_id=found, by=by[:MAX_BY_CHARS], reason=reason[:MAX_REASON_CHARS], at=at))


def expire_due(rt: Runtime, now: float | None = None, limit: int = 100,
               ) -> list[tuple[str, str]]:
    """Expire every pending review past its ``expires_at`` (the supervisor's sweep calls
    this); returns ``(run_id, review_id)`` of each review expired."""
    now = time.time() if now is None else now
    done: list[tuple[str, str]] = []
    for view in rt.store.by_status(RunStatus.WAITING_HUMAN, limit):
        review_id, review = _pending_of(view)
        expires = review["expires_at"] if review is not None else None
        if review_id is None or expires is None or expires > now:
            continue
        try:
            run_id = view["run_id"]
            done.append((run_id, _decide(rt, run_id, review_id, partial(
                _expired, expires_at=expires))))
        except NoPendingReview:
            continue  # decided by a person meanwhile
    return done


def _pending_review(view: View) -> PendingReview | None:
    review_id, review = _pending_of(view)
    if review_id is None or review is None:
        return None
    return PendingReview(
        run_id=view["run_id"], review_id=review_id, graph_id=view["graph_id"] or "",
        reason=review["reason"], subject=review["subject"],
        requested_step=review["step"], expires_at=review["expires_at"],
        user_id=view["user_id"], session_id=view["session_id"])


def _pending_of(view: View) -> tuple[str | None, ReviewDoc | None]:
    waiting = view["waiting"]
    review = view["reviews"].get(waiting) if waiting is not None else None
    if view["status"] != RunStatus.WAITING_HUMAN or not review or review["status"] != "pending":
        return None, None
    return waiting, review


def _expired(review_id: str, at: float, *, expires_at: float) -> ev.HumanReviewExpired:
    return ev.HumanReviewExpired(review_id=review_id, expires_at=expires_at, at=at)


#: A review's decision event, given the review's id and the time it was taken.
_Decided = Callable[[str, float], ev.HumanReviewApproved | ev.HumanReviewRejected
                   | ev.HumanReviewExpired]


def _decide(rt: Runtime, run_id: str, review_id: str | None, decided: _Decided) -> str:
    with rt.store.transaction() as tx:
        view = tx.lock(run_id)
        if view is None:
            raise RunNotFound(f"no run {run_id!r} in the event store")
        found, _ = _pending_of(view)
        if found is None or (review_id is not None and review_id != found):
            what = f"review {review_id}" if review_id else "a review"
            raise NoPendingReview(f"run {run_id} is {view['status']}, not waiting for {what}")
        tx.emit(run_id, decided(found, time.time()))
        tx.after_commit(lambda: canvas.kickoff(rt.app, run_id, found))
    return found

