"""The graph model: nodes, decisions, outcomes, and build-time validation."""

from hypha_celery.graph.decisions import Decision, FanOut, Finish, Next
from hypha_celery.graph.model import Context, ErrorInfo, Graph, Node, Outcome

__all__ = [
    "Context",
    "Decision",
    "ErrorInfo",
    "FanOut",
    "Finish",
    "Graph",
    "Next",
    "Node",
    "Outcome",
]
