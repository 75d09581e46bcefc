"""Workflows compiled to an FSM that runs as a decision policy inside the coordinator."""

from hypha_celery.fsm.machine import Fsm, Transition, TransitionPolicy
from hypha_celery.fsm.policy import WorkflowPolicy, resolve, workflow_graph
from hypha_celery.fsm.spec import (
    RECOVERY_STATES,
    HumanReviewPolicy,
    StateRetry,
    StateSpec,
    TransitionSpec,
    WorkflowSpec,
    problems,
)

__all__ = [
    "RECOVERY_STATES",
    "Fsm",
    "HumanReviewPolicy",
    "StateRetry",
    "StateSpec",
    "Transition",
    "TransitionPolicy",
    "TransitionSpec",
    "WorkflowPolicy",
    "WorkflowSpec",
    "problems",
    "resolve",
    "workflow_graph",
]
