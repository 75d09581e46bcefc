"""The one seam for cross-cutting concerns (telemetry, metrics, tracing, retries, leases).

A ``Middleware`` overrides the hooks it needs; a ``MiddlewareStack`` calls them, one
typed method a hook: ``before_*`` in list order, ``after_*`` in reverse; a hook that
raises is logged and never breaks a run or a turn. Hooks and what they are told (the
records below): run start and end, the coordinator step, a node attempt (what becomes of
it: retry or dead letter, its late result), a model or tool call a node makes through its
context, a task message published, a worker process's boot, fork and shutdown, an agent
turn, a supervisor sweep. Celery's signals reach the hooks through one module
(``_celery_signals``); forks are told once (:func:`on_fork` for what is not a
middleware)."""

from hypha_celery.middleware._hooks import (
    Attempt,
    AttemptEnd,
    Call,
    CallEnd,
    Process,
    Publish,
    RetryRule,
    RunEnd,
    RunStart,
    Settling,
    Step,
    Sweep,
    Turn,
    TurnEnd,
)
from hypha_celery.middleware._process import on_fork
from hypha_celery.middleware._stack import (
    EMPTY,
    HOOKS,
    Hook,
    Middleware,
    MiddlewareStack,
    check_signatures,
)

__all__ = [
    # writing a middleware
    "HOOKS",
    "Hook",
    "Middleware",
    "check_signatures",
    # what the hooks are told
    "Attempt",
    "AttemptEnd",
    "Call",
    "CallEnd",
    "Process",
    "Publish",
    "RetryRule",
    "RunEnd",
    "RunStart",
    "Settling",
    "Step",
    "Sweep",
    "Turn",
    "TurnEnd",
    # calling them
    "EMPTY",
    "MiddlewareStack",
    # a process's fork
    "on_fork",
]
