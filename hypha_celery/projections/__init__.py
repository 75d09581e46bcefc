"""Views derived from events alone (hypha's projections): a run, a session, an audit.

Each view is a pure function of a list of :class:`~hypha_celery.events.Event` and a
frozen pydantic model; :mod:`~hypha_celery.projections.stored` reads a store's events
for them.
"""

from hypha_celery.projections.audit import (
    AuditView,
    Counts,
    Decision,
    ModelCall,
    Outcome,
    PolicyDecision,
    ToolCall,
    audit_view,
)
from hypha_celery.projections.run import RunError, RunStatus, RunView, run_view
from hypha_celery.projections.session import (
    SessionRun,
    SessionStatus,
    SessionView,
    StatusCounts,
    session_view,
)
from hypha_celery.projections.stored import runs_of_session, stored_session

__all__ = [
    # a run
    "RunError",
    "RunStatus",
    "RunView",
    "run_view",
    # a session
    "SessionRun",
    "SessionStatus",
    "SessionView",
    "StatusCounts",
    "session_view",
    # an audit
    "AuditView",
    "Counts",
    "Decision",
    "ModelCall",
    "Outcome",
    "PolicyDecision",
    "ToolCall",
    "audit_view",
    # over a store
    "runs_of_session",
    "stored_session",
]
