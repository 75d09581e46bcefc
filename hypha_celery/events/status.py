"""A run's status as its projection (:func:`~hypha_celery.events.fold.fold`) says it,
and the one set of statuses a run ends in."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["TERMINAL_STATUSES", "Status"]


class Status(StrEnum):
    """Where a run is. A ``StrEnum``: stored and sent as the plain string it always was
    (``"running"``), and equal to it."""

    NEW = "new"
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_HUMAN = "waiting_human"
    QUARANTINED = "quarantined"
    PARKED = "parked"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @classmethod
    def terminal(cls) -> frozenset[Status]:
        """The statuses a run ends in (:data:`TERMINAL_STATUSES`)."""
        return TERMINAL_STATUSES

    @property
    def ended(self) -> bool:
        return self in TERMINAL_STATUSES


#: The statuses a run ends in: nothing follows them (but late results).
TERMINAL_STATUSES: frozenset[Status] = frozenset(
    {Status.COMPLETED, Status.FAILED, Status.CANCELLED})
