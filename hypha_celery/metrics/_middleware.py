"""``PrometheusMiddleware``: counters and histograms from the middleware hooks.

Each process records its own: run starts where runs are admitted (the client's
``Hypha.start``, or the worker that hands a lane to a queued run), run ends, node
attempts, their model and tool calls, retries, dead letters and sweeps in the worker
that commits or runs them. With ``HYPHA_METRICS_PORT`` set, the metrics are built in
multiprocess mode (:mod:`~hypha_celery.metrics._exporter`), so a prefork worker's
children are summed."""

from __future__ import annotations

import threading
from typing import Any

from hypha_celery.backends.llm.errors import ModelErrorKind
from hypha_celery.metrics import _exporter as exporter
from hypha_celery.metrics import names
from hypha_celery.metrics._client import prometheus
from hypha_celery.middleware import (
    Attempt,
    AttemptEnd,
    Call,
    CallEnd,
    Middleware,
    RunEnd,
    RunStart,
    Sweep,
)

#: Node durations: 5 ms to 5 min (model calls sit in the seconds).
NODE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                120.0, 300.0)
SWEEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _label(value: str | None) -> str:
    return value or "none"


_MODEL_ERROR_KINDS = frozenset(ModelErrorKind)


def _error_kind(kind: str | None) -> str:
    """A failed model call's kind as a bounded label: one of
    :class:`~hypha_celery.backends.llm.errors.ModelErrorKind`, ``other`` for another
    kind, ``none`` when the call did not fail with a ``BackendError``."""
    if kind is None:
        return "none"
    return kind if kind in _MODEL_ERROR_KINDS else "other"


class Metrics:
    """The counters and histograms, registered once per registry."""

    def __init__(self, registry: Any) -> None:
        p = prometheus()

        def counter(name: str, doc: str, *labels: str) -> Any:
            return p.Counter(name, doc, labels, registry=registry)

        self.runs_started = counter(names.RUNS_STARTED, "Runs started", "graph")
        self.runs_queued = counter(names.RUNS_QUEUED, "Runs queued behind their lane", "graph")
        self.runs_completed = counter(names.RUNS_COMPLETED, "Runs completed", "graph")
        self.runs_failed = counter(names.RUNS_FAILED, "Runs failed", "graph", "reason")
        self.runs_cancelled = counter(names.RUNS_CANCELLED, "Runs cancelled", "graph")
        self.node_duration = p.Histogram(
            names.NODE_DURATION, "Node attempt duration", ("node", "outcome"),
            buckets=NODE_BUCKETS, registry=registry)
        self.call_duration = p.Histogram(
            names.CALL_DURATION, "Model or tool call duration (ctx.model, ctx.llm, ctx.tool)",
            ("kind", "name", "outcome"), buckets=NODE_BUCKETS, registry=registry)
        self.model_call_failures = counter(
            names.MODEL_CALL_FAILURES, "Model calls failed (ctx.model, ctx.llm), by error kind",
            "model", "error_kind")
        self.retries = counter(names.NODE_RETRIES, "Node retries scheduled", "node")
        self.dead_letters = counter(names.DEAD_LETTERS, "Node executions dead-lettered",
                                    "node", "reason")
        self.late_results = counter(names.LATE_RESULTS, "Late node results logged",
                                    "node", "reason")
        self.sweep_duration = p.Histogram(
            names.SWEEP_DURATION, "Recovery supervisor sweep duration", (),
            buckets=SWEEP_BUCKETS, registry=registry)
        self.sweep_decisions = counter(names.SWEEP_DECISIONS, "Supervisor decisions taken")
        self.mcp_calls = counter(names.MCP_CALLS, "MCP tool calls made by the gateway, by status",
                                 "server", "tool", "status")
        self.mcp_call_seconds = p.Histogram(
            names.MCP_CALL_SECONDS, "MCP tool call duration", ("server",),
            buckets=NODE_BUCKETS, registry=registry)


#: One :class:`Metrics` per registry (by id, with the registry kept alive): a second
#: middleware on the same registry (two apps in one process) shares the first's.
_BY_REGISTRY: dict[int, tuple[Any, Metrics]] = {}
_LOCK = threading.Lock()


def metrics_in(registry: Any) -> Metrics:
    with _LOCK:
        if id(registry) not in _BY_REGISTRY:
            _BY_REGISTRY[id(registry)] = (registry, Metrics(registry))
        return _BY_REGISTRY[id(registry)][1]


class PrometheusMiddleware(Middleware):
    """Records runs, node attempts, model and tool calls, retries, dead letters, late
    results and supervisor sweeps in ``registry`` (default: prometheus_client's global one)."""

    def __init__(self, registry: Any = None) -> None:
        exporter.prepare_multiprocess()  # before the metrics are built
        m = metrics_in(prometheus().REGISTRY if registry is None else registry)
        self.runs_started, self.runs_queued = m.runs_started, m.runs_queued
        self.runs_completed, self.runs_failed = m.runs_completed, m.runs_failed
        self.runs_cancelled, self.node_duration = m.runs_cancelled, m.node_duration
        self.retries, self.dead_letters = m.retries, m.dead_letters
        self.late_results, self.sweep_duration = m.late_results, m.sweep_duration
        self.sweep_decisions, self.call_duration = m.sweep_decisions, m.call_duration
        self.model_call_failures = m.model_call_failures

    def after_run_start(self, run: RunStart) -> None:
        (self.runs_queued if run.queued else self.runs_started).labels(
            _label(run.graph_id)).inc()

    def after_run_end(self, run: RunEnd) -> None:
        graph = _label(run.graph_id)
        if run.status == "completed":
            self.runs_completed.labels(graph).inc()
        elif run.status == "failed":
            self.runs_failed.labels(graph, _label(run.reason)).inc()
        elif run.status == "cancelled":
            self.runs_cancelled.labels(graph).inc()

    def after_attempt(self, attempt: Attempt, end: AttemptEnd) -> None:
        if end.error_type == "Stale":
            return  # the node did not run
        outcome = "ok" if end.ok else "error"
        self.node_duration.labels(attempt.node, outcome).observe(end.duration_s)

    def after_call(self, call: Call, end: CallEnd) -> None:
        self.call_duration.labels(call.kind, call.name,
                                  "ok" if end.error_type is None else "error"
                                  ).observe(end.duration_s)
        if end.error_type is not None and call.kind == "model":
            self.model_call_failures.labels(call.name, _error_kind(end.error_kind)).inc()

    def after_retry_scheduled(self, attempt: Attempt, delay: float) -> None:
        self.retries.labels(attempt.node).inc()

    def after_dead_letter(self, attempt: Attempt, reason: str) -> None:
        self.dead_letters.labels(attempt.node, _label(reason)).inc()

    def after_late_result(self, attempt: Attempt, reason: str) -> None:
        self.late_results.labels(attempt.node, _label(reason)).inc()

    def after_sweep(self, sweep: Sweep) -> None:
        self.sweep_duration.observe(sweep.duration_s)
        if sweep.decisions:
            self.sweep_decisions.inc(sweep.decisions)
