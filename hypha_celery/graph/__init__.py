"""The graph model: nodes, decisions, outcomes, retries, and build-time validation."""

from hypha_celery.graph.decisions import Decision, FanOut, Finish, Next
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
    "Context",
    "Decision",
    "ErrorClass",
    "ErrorInfo",
    "FanOut",
    "Finish",
    "Graph",
    "Next",
    "Node",
    "NodeContext",
    "Outcome",
    "RetryPolicy",
    "SideEffect",
    "classify",
]
