"""hypha-celery: durable, distributed AI-agent graph executions on Celery."""

from hypha_celery.beat import RecoveryPolicy
from hypha_celery.client.hypha import Hypha
from hypha_celery.client.run import RunHandle, RunSnapshot
from hypha_celery.client.scoped import ScopedHypha
from hypha_celery.client.sessions import SessionOpening
from hypha_celery.errors import (
    BrokerUnavailable,
    FailureReason,
    GraphSpecError,
    HyphaError,
    InputTooLarge,
    InvalidNotify,
    LaneBusy,
    NotPermitted,
    NotRedrivable,
    Overloaded,
    RunCancelled,
    RunFailed,
    RunNotFound,
    RunTimeout,
    SpecError,
    TooLarge,
    UnknownGraph,
    WaitTimeout,
)
from hypha_celery.events import Event, RunStatus
from hypha_celery.graph import (
    Context,
    ErrorInfo,
    Fail,
    FanOut,
    Finish,
    Graph,
    Next,
    Node,
    NodeContext,
    Outcome,
    RetryPolicy,
    Review,
    classify,
)
from hypha_celery.principals import Principal
from hypha_celery.runtime.config import Settings

__version__ = "0.1.0"

__all__ = [
    # application
    "Hypha",
    "RunHandle",
    "RunSnapshot",
    "RunStatus",
    "SessionOpening",
    "Settings",
    # principals: scoped clients
    "Principal",
    "ScopedHypha",
    # graph model
    "Context",
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
    "classify",
    # recovery
    "RecoveryPolicy",
    # events
    "Event",
    # errors
    "BrokerUnavailable",
    "FailureReason",
    "GraphSpecError",
    "HyphaError",
    "InputTooLarge",
    "InvalidNotify",
    "LaneBusy",
    "NotPermitted",
    "NotRedrivable",
    "Overloaded",
    "RunCancelled",
    "RunFailed",
    "RunNotFound",
    "RunTimeout",
    "SpecError",
    "TooLarge",
    "UnknownGraph",
    "WaitTimeout",
]
