"""The graph model: nodes, decisions, outcomes, retries, and build-time validation."""

from hypha_celery.graph.decisions import (
    DEFAULT_MAX_FANOUT,
    Decision,
    Fail,
    FanOut,
    Finish,
    Next,
    Review,
)
from hypha_celery.graph.model import (
    AT_MOST_ONCE,
    Context,
    ErrorInfo,
    Graph,
    Node,
    NodeContext,
    Outcome,
    SideEffect,
)
from hypha_celery.graph.retry import ErrorClass, RetryPolicy, classify

__all__ = [
    "AT_MOST_ONCE",
    "DEFAULT_MAX_FANOUT",
    "Context",
    "Decision",
    "ErrorClass",
    "ErrorInfo",
    "Fail",
    "FanOut",
    "Finish",
    "Graph",
    "Next",
    "Node",
    "NodeContext",
    "Outcome",
    "RetryPolicy",
    "Review",
    "SideEffect",
    "classify",
]
