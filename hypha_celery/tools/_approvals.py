"""Where governed calls keep human reviews and the results of invocations.

:class:`ApprovalStore` is the protocol :class:`~hypha_celery.tools.GovernedRunner`
uses (JSON in, JSON out); :class:`MemoryApprovals` keeps both in memory, for tests and
in-process use, and is where a human approves, rejects or expires a review.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Literal, Protocol, Required, TypedDict, cast

from hypha_celery.errors import NoPendingReview, ReviewError
from hypha_celery.jsontypes import JsonObject
from hypha_celery.tools._result import ToolResultJson

__all__ = ["ApprovalStore", "MemoryApprovals", "ReviewRecord", "ReviewRequest", "ReviewStatus",
           "review_status"]

ReviewStatus = Literal["pending", "approved", "rejected", "expired"]


class ReviewRequest(TypedDict):
    """What a governed call asks a person to review (``request_review``'s ``info``)."""

    call_id: str
    tool: str
    input_hash: str | None
    side_effect: str
    reason: str
    requested_at: float
    expires_at: float | None


class ReviewRecord(ReviewRequest, total=False):
    """A review as an :class:`ApprovalStore` gives it back: the request, its id and
    status, and once decided who decided, when (and a rejection's ``reason``)."""

    review_id: Required[str]
    status: Required[ReviewStatus]
    decided_by: str
    decided_at: float


class ApprovalStore(Protocol):
    """Reviews by review id, results by invocation id; plain JSON objects only."""

    def review(self, review_id: str) -> ReviewRecord | None:
        """``{"status": "pending" | "approved" | "rejected" | "expired", ...}`` (the
        request's info, plus ``decided_by`` / ``reason`` once decided), or ``None``."""

    def request_review(self, review_id: str, info: ReviewRequest) -> None:
        """Record a pending review with ``info`` (tool, input hash, expiry, ...)."""

    def result(self, invocation_id: str) -> ToolResultJson | None:
        """The stored result of an invocation (``ToolResult.to_json()``), or ``None``."""

    def store_result(self, invocation_id: str, result: ToolResultJson) -> None:
        """Keep an invocation's result; later calls with that id are served from it."""


def review_status(review: Mapping[str, object], now: float) -> str:
    """``review``'s status, ``expired`` when it is pending past its ``expires_at``."""
    status = str(review.get("status"))
    expires_at = review.get("expires_at")
    if status == "pending" and isinstance(expires_at, int | float) and now >= expires_at:
        return "expired"
    return status


def _json(value: Mapping[str, object]) -> JsonObject:
    """A deep copy that is plain JSON (TypeError / ValueError otherwise)."""
    copy: JsonObject = json.loads(json.dumps(value, allow_nan=False))
    return copy


class MemoryApprovals:
    """An in-memory :class:`ApprovalStore`. ``approve`` / ``reject`` / ``expire`` decide
    a pending review once (:class:`~hypha_celery.errors.NoPendingReview` for an unknown
    id, :class:`~hypha_celery.errors.ReviewError` for one already decided or expired)."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self.now = now
        self._reviews: dict[str, ReviewRecord] = {}
        self._results: dict[str, ToolResultJson] = {}

    def review(self, review_id: str) -> ReviewRecord | None:
        found = self._reviews.get(review_id)
        if found is None:
            return None
        if review_status(found, self.now()) == "expired" and found["status"] == "pending":
            found["status"] = "expired"
        return cast(ReviewRecord, _json(found))

    def request_review(self, review_id: str, info: ReviewRequest) -> None:
        if review_id in self._reviews:
            raise ReviewError(f"review {review_id} was already requested")
        self._reviews[review_id] = cast(ReviewRecord, _json(
            {**info, "review_id": review_id, "status": "pending"}))

    def pending(self) -> list[ReviewRecord]:
        """The reviews still waiting for a decision, in request order."""
        found = (self.review(review_id) for review_id in list(self._reviews))
        return [r for r in found if r is not None and r["status"] == "pending"]

    def approve(self, review_id: str, by: str) -> None:
        self._decide(review_id, "approved", decided_by=by)

    def reject(self, review_id: str, by: str, reason: str = "") -> None:
        self._decide(review_id, "rejected", decided_by=by, reason=reason)

    def expire(self, review_id: str) -> None:
        self._decide(review_id, "expired")

    def result(self, invocation_id: str) -> ToolResultJson | None:
        found = self._results.get(invocation_id)
        return None if found is None else cast(ToolResultJson, _json(found))

    def store_result(self, invocation_id: str, result: ToolResultJson) -> None:
        self._results[invocation_id] = cast(ToolResultJson, _json(result))

    def _decide(self, review_id: str, status: ReviewStatus, decided_by: str | None = None,
                reason: str | None = None) -> None:
        current = self.review(review_id)
        if current is None:
            raise NoPendingReview(f"no review {review_id}")
        if current["status"] != "pending":
            raise ReviewError(f"review {review_id} is already {current['status']}")
        found = self._reviews[review_id]
        found["status"] = status
        found["decided_at"] = self.now()
        if decided_by is not None:
            found["decided_by"] = decided_by
        if reason is not None:
            found["reason"] = reason
