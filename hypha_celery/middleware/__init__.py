"""The one seam for cross-cutting concerns (telemetry, metrics, tracing, retries, leases).

A ``Middleware`` overrides the hooks it needs; a ``MiddlewareStack`` calls them:
``before_*`` in list order, ``after_*`` in reverse; a hook that raises is logged and never
breaks a run or a turn. Hooks and what they are told (``hooks``): run start and end, the
coordinator step, a node attempt (and its retry, dead letter, late result), a model or tool
call a node makes through its context, an agent turn, a supervisor sweep."""

from hypha_celery.middleware.hooks import (
    Attempt,
    AttemptEnd,
    Call,
    CallEnd,
    RunEnd,
    RunStart,
    Step,
    Sweep,
    Turn,
    TurnEnd,
)
from hypha_celery.middleware.stack import EMPTY, HOOKS, Middleware, MiddlewareStack

__all__ = ["EMPTY", "HOOKS", "Attempt", "AttemptEnd", "Call", "CallEnd", "Middleware",
           "MiddlewareStack", "RunEnd", "RunStart", "Step", "Sweep", "Turn", "TurnEnd"]
