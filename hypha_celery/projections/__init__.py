"""Views derived from events alone (hypha's projections): a run, a session, an audit.

Each view is a pure function of a list of :class:`~hypha_celery.events.Event` and a
frozen pydantic model; :func:`stored_session` and :func:`runs_of_session` read a
store's events for them.
"""

import warnings
from typing import Any

from hypha_celery.projections._audit import (
    AuditDecision,
    AuditOutcome,
    AuditPolicyDecision,
    AuditView,
    ContextBuild,
    Counts,
    MemoryRead,
    ModelCall,
    SkillActivation,
    ToolCall,
    audit_view,
)
from hypha_celery.projections._cases import AuditCase, AuditCaseCycle, recovery_cases
from hypha_celery.projections._run import RunError, RunStatus, RunView, run_view
from hypha_celery.projections._session import (
    SessionRun,
    SessionStatus,
    SessionView,
    StatusCounts,
    session_view,
)
from hypha_celery.projections._stored import runs_of_session, stored_session

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
    "AuditCase",
    "AuditCaseCycle",
    "AuditDecision",
    "AuditOutcome",
    "AuditPolicyDecision",
    "AuditView",
    "ContextBuild",
    "Counts",
    "MemoryRead",
    "ModelCall",
    "SkillActivation",
    "ToolCall",
    "audit_view",
    "recovery_cases",
    # over a store
    "runs_of_session",
    "stored_session",
]

#: The audit's former names (one of four ``Decision`` s, ``Outcome`` s, two
#: ``PolicyDecision`` s in the package): they resolve with a DeprecationWarning.
_RENAMED = {"Decision": AuditDecision, "Outcome": AuditOutcome,
            "PolicyDecision": AuditPolicyDecision}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        new = _RENAMED[name]
        warnings.warn(f"hypha_celery.projections.{name} has been renamed to {new.__name__}",
                      DeprecationWarning, stacklevel=2)
        return new
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
