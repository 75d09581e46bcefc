"""Deterministic evaluation of recorded runs: output contracts (JSON Schema), trace
completeness, evaluation specs and regression against replay fixtures. Nothing here calls
a model, a tool or a human; what it records in a run's log is ``eval.*`` /
``regression.*`` only (see :func:`record`). See docs/traces.md.
"""

from hypha_celery.evaluation.contracts import OutputContract, json_path, validate_output
from hypha_celery.evaluation.evaluator import (
    EvaluationSpec,
    EvaluationType,
    evaluate,
    evaluate_run,
)
from hypha_celery.evaluation.regression import (
    DEFAULT_CHECKS,
    RegressionCase,
    RegressionCheck,
    RegressionReport,
    RegressionSpec,
    run_case,
    run_regression,
)
from hypha_celery.evaluation.results import Check, EvaluationResult, EvaluationSummary
from hypha_celery.evaluation.trace import LIFECYCLE_PAIRS, TraceSpec, evaluate_trace
from hypha_celery.replay.record import RESERVED_PREFIXES, check_recordable, record

__all__ = [
    "DEFAULT_CHECKS",
    "LIFECYCLE_PAIRS",
    "RESERVED_PREFIXES",
    "Check",
    "EvaluationResult",
    "EvaluationSpec",
    "EvaluationSummary",
    "EvaluationType",
    "OutputContract",
    "RegressionCase",
    "RegressionCheck",
    "RegressionReport",
    "RegressionSpec",
    "TraceSpec",
    "check_recordable",
    "evaluate",
    "evaluate_run",
    "evaluate_trace",
    "json_path",
    "record",
    "run_case",
    "run_regression",
    "validate_output",
]
