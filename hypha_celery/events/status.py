"""A run's status: the one vocabulary the store's projection
(:func:`~hypha_celery.events.fold.fold`), the event-only view
(:func:`~hypha_celery.projections.run_view`), the CLI and the console use, and the
statuses a run ends in."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["HELD_STATUSES", "TERMINAL_STATUSES", "CaseStatus", "RunStatus"]


class RunStatus(StrEnum):
    """Where a run is. A ``StrEnum``: stored, printed and sent as the plain string it
    always was (``"running"``), and equal to it.

    The store's projection uses all nine. The event-only view
    (:class:`~hypha_celery.projections.RunView`) never says ``new`` (a run has
    events), and says ``running`` for a run held by ``quarantined`` / ``parked`` (hypha's
    rule), naming the hold in ``held``.
    """

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
    def terminal(cls) -> frozenset[RunStatus]:
        """The statuses a run ends in (:data:`TERMINAL_STATUSES`)."""
        return TERMINAL_STATUSES

    @property
    def ended(self) -> bool:
        return self in TERMINAL_STATUSES


#: The statuses a run ends in: nothing follows them (but late results).
TERMINAL_STATUSES: frozenset[RunStatus] = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
#: The statuses of a run an operator must look at (a node's effect unknown, a dead letter).
HELD_STATUSES: frozenset[RunStatus] = frozenset({RunStatus.QUARANTINED, RunStatus.PARKED})

class CaseStatus(StrEnum):
    """Where a workflow state's recovery case is (``recovery.case.*``): ``open`` while
    strategies are tried (``compensating`` while committed effects are undone), then
    ``resolved`` (a retry succeeded), ``degraded`` (a fallback or a degrade did),
    ``escalated`` (to human review) or ``quarantined`` (held for a person)."""

    OPEN = "open"
    COMPENSATING = "compensating"
    RESOLVED = "resolved"
    DEGRADED = "degraded"
    ESCALATED = "escalated"
    QUARANTINED = "quarantined"

    @property
    def ended(self) -> bool:
        return self not in (CaseStatus.OPEN, CaseStatus.COMPENSATING)


#: The name this enum had before it was the one vocabulary; new code says ``RunStatus``.
Status = RunStatus
