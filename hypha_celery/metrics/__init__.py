"""Prometheus metrics (the ``metrics`` extra: ``pip install 'hypha-celery[metrics]'``).

``PrometheusMiddleware`` records runs, node attempts, retries, dead letters, late results
and supervisor sweeps from the middleware hooks; :func:`export` makes each worker serve
them on ``HYPHA_METRICS_PORT`` with the gauges read on scrape (queue depths, agents by
phase, quarantined MCP tools ...); the MCP gateway's calls are counted through
:func:`observe_mcp_call`::

    metrics = PrometheusMiddleware()
    hypha = Hypha(settings, middleware=[metrics])
    export(hypha)  # a no-op unless HYPHA_METRICS_PORT is set

``hypha metrics`` prints (or serves) the queue depths without a worker. The names are in
:mod:`~hypha_celery.metrics.names`, the one public module here (dashboards and alerts
read it); prometheus_client is imported only when used."""

from __future__ import annotations

from typing import Any

from hypha_celery.metrics._collector import HyphaCollector
from hypha_celery.metrics._depth import queue_depths
from hypha_celery.metrics._exporter import install
from hypha_celery.metrics._initial import Initialized, built
from hypha_celery.metrics._mcp import McpCallStatus, declare_mcp_tools, observe_mcp_call
from hypha_celery.metrics._middleware import PrometheusMiddleware


def export(hypha: Any) -> None:
    """With ``HYPHA_METRICS_PORT`` set, the workers of ``hypha`` (a
    :class:`~hypha_celery.Hypha`) serve ``/metrics`` there: the middleware's metrics
    of every worker process, queue depths of ``hypha.queues()`` and agents by phase.

    Set or not, the series of ``hypha``'s graphs and nodes are made at 0 in every
    ``PrometheusMiddleware``'s metrics of this process (:mod:`~hypha_celery.metrics._initial`):
    call it once the graphs are registered; a graph registered later gets its series at
    the next scrape."""
    install(hypha.celery, collector_of(hypha))


def collector_of(hypha: Any) -> HyphaCollector:
    """What :func:`export` serves besides the recorded metrics: the gauges of ``hypha``
    (a :class:`~hypha_celery.Hypha`), after the zero series of its graphs (made now, and
    for graphs registered since at each scrape)."""
    known = Initialized(built())
    known.catch_up(hypha.graphs)
    return HyphaCollector(hypha.celery, hypha.queues, hypha.store,
                          before=lambda: known.catch_up(hypha.graphs))


__all__ = [
    # recording
    "PrometheusMiddleware",
    # serving
    "HyphaCollector",
    "collector_of",
    "export",
    "queue_depths",
    # the MCP gateway's calls
    "McpCallStatus",
    "declare_mcp_tools",
    "observe_mcp_call",
]
