"""Deterministic evaluation of recorded runs: output contracts (JSON Schema), trace
completeness, evaluation specs and regression against replay fixtures. Nothing here calls
a model, a tool or a human; what it records in a run's log is ``eval.*`` /
``regression.*`` only (see :func:`record`). See docs/traces.md.
"""

from hypha_celery.evaluation._contracts import OutputContract, json_path, validate_output
from hypha_celery.evaluation._evaluator import (
    EvaluationSpec,
    EvaluationType,
    evaluate,
    evaluate_run,
)
from hypha_celery.evaluation._regression import (
    DEFAULT_CHECKS,
    RegressionCase,
    RegressionCheck,
    RegressionReport,
    RegressionSpec,
    run_case,
    run_regression,
)
from hypha_celery.evaluation._results import Check, EvaluationResult, EvaluationSummary
from hypha_celery.evaluation._trace import LIFECYCLE_PAIRS, TraceSpec, evaluate_trace
from hypha_celery.replay._record import RESERVED_PREFIXES, check_recordable, record

__all__ = [
    # output contracts
    "OutputContract",
    "json_path",
    "validate_output",
    # evaluating a run
    "Check",
    "EvaluationResult",
    "EvaluationSpec",
    "EvaluationSummary",
    "EvaluationType",
    "evaluate",
    "evaluate_run",
    # trace completeness
    "LIFECYCLE_PAIRS",
    "TraceSpec",
    "evaluate_trace",
    # regression against replay fixtures
    "DEFAULT_CHECKS",
    "RegressionCase",
    "RegressionCheck",
    "RegressionReport",
    "RegressionSpec",
    "run_case",
    "run_regression",
    # recording in a run's log
    "RESERVED_PREFIXES",
    "check_recordable",
    "record",
]
