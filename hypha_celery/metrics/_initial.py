"""Every series whose labels are known before anything happened, set to 0.

A labelled Prometheus metric has no series, and in multiprocess mode not even its name,
until its first ``labels(...)``: an alert written with ``absent()`` would fire on a
healthy deployment that has not cancelled a run yet. :func:`initialize` makes, for each
graph of the app and each of its nodes, the series of every known label value:

* ``hypha_runs_{started,queued,completed,cancelled}_total{graph}``;
* ``hypha_runs_failed_total{graph,reason}``, every :class:`~hypha_celery.errors.FailureReason`;
* ``hypha_node_duration_seconds{node,outcome}`` (``ok``, ``error``),
  ``hypha_node_retries_total{node}``, ``hypha_dead_letters_total{node,reason}``
  (:data:`DEAD_LETTER_REASONS`), ``hypha_late_results_total{node,reason}``
  (:data:`LATE_REASONS`).

The metrics without labels exist from their definition. The labels that cannot be known
beforehand stay absent until first used: ``hypha_call_duration_seconds`` (its ``name`` is a
model reference or a tool's name, known when a node calls it) and any other metric labelled
by the model a call names (docs/operations.md, "Metrics", says how to alert on them).
A reason label ``none`` (a run failed without a reason) appears when it happens."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Final

from hypha_celery.errors import FailureReason

__all__ = ["DEAD_LETTER_REASONS", "LATE_REASONS", "OUTCOMES", "Initialized", "built",
           "initialize"]

#: ``outcome`` of node durations.
OUTCOMES: Final = ("ok", "error")
#: Why a node execution was dead-lettered (``after_dead_letter``).
DEAD_LETTER_REASONS: Final = ("retries_exhausted", "delivery_limit")
#: Why a late result was logged (``after_late_result``): the run's status when it came,
#: or the supervisor's timeout.
LATE_REASONS: Final = ("timeout", "cancelled", "superseded", "quarantined", "parked",
                       "run_ended")


def initialize(metrics: Any, graphs: Mapping[str, Any]) -> None:
    """The series of ``graphs`` (id -> :class:`~hypha_celery.graph.Graph`) in ``metrics``
    (a :class:`~hypha_celery.metrics._middleware.Metrics`), at 0; idempotent."""
    for graph_id, graph in graphs.items():
        for counter in (metrics.runs_started, metrics.runs_queued, metrics.runs_completed,
                        metrics.runs_cancelled):
            counter.labels(graph_id)
        for reason in FailureReason:
            metrics.runs_failed.labels(graph_id, reason.value)
        for node in graph.nodes:
            _node(metrics, node)


def _node(metrics: Any, node: str) -> None:
    for outcome in OUTCOMES:
        metrics.node_duration.labels(node, outcome)
    metrics.retries.labels(node)
    for reason in DEAD_LETTER_REASONS:
        metrics.dead_letters.labels(node, reason)
    for reason in LATE_REASONS:
        metrics.late_results.labels(node, reason)


def built() -> list[Any]:
    """Every :class:`~hypha_celery.metrics._middleware.Metrics` this process built (one per
    registry its ``PrometheusMiddleware`` instances record in)."""
    from hypha_celery.metrics import _middleware as middleware

    with middleware._LOCK:
        return [metrics for _registry, metrics in middleware._BY_REGISTRY.values()]


class Initialized:
    """The graphs already initialized in each of some metrics: :meth:`catch_up` adds
    the series of graphs registered since (a set difference when there are none)."""

    def __init__(self, metrics: Iterable[Any]) -> None:
        self.metrics = tuple(metrics)
        self._done: set[str] = set()
        self._lock = threading.Lock()

    def catch_up(self, graphs: Mapping[str, Any]) -> None:
        with self._lock:
            new = {g: graphs[g] for g in graphs.keys() - self._done}
            if not new:
                return
            for metrics in self.metrics:
                initialize(metrics, new)
            self._done |= new.keys()
