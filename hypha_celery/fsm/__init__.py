"""Workflows compiled to an FSM that runs as a decision policy inside the coordinator."""

from hypha_celery.fsm.machine import Fsm, Transition, TransitionPolicy
from hypha_celery.fsm.policy import WorkflowPolicy, resolve, workflow_graph
from hypha_celery.fsm.recovery import Failure, Plan, RecoveryAction, evidence_hash, plan
from hypha_celery.fsm.spec import (
    DEFAULT_STRATEGIES,
    RECOVERY_STATES,
    HumanReviewPolicy,
    RecoveryStrategy,
    StateRecovery,
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
    # recovery cases
    "DEFAULT_STRATEGIES",
    "Failure",
    "Plan",
    "RecoveryAction",
    "RecoveryStrategy",
    "StateRecovery",
    "evidence_hash",
    "plan",
]
