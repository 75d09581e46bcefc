"""Prometheus metrics (the ``metrics`` extra: ``pip install 'hypha-celery[metrics]'``).

``PrometheusMiddleware`` records runs, node attempts, retries, dead letters, late results
and supervisor sweeps from the middleware hooks; :func:`export` makes each worker serve
them on ``HYPHA_METRICS_PORT`` with the gauges read on scrape (queue depths, agents by
phase)::

    metrics = PrometheusMiddleware()
    hypha = Hypha(settings, middleware=[metrics])
    export(hypha)  # a no-op unless HYPHA_METRICS_PORT is set

``hypha metrics`` prints (or serves) the queue depths without a worker. The names are in
:mod:`~hypha_celery.metrics.names`; prometheus_client is imported only when used."""

from __future__ import annotations

from typing import Any

from hypha_celery.metrics.collector import HyphaCollector
from hypha_celery.metrics.depth import queue_depths
from hypha_celery.metrics.exporter import install
from hypha_celery.metrics.middleware import PrometheusMiddleware


def export(hypha: Any) -> None:
    """With ``HYPHA_METRICS_PORT`` set, the workers of ``hypha`` (a
    :class:`~hypha_celery.Hypha`) serve ``/metrics`` there: the middleware's metrics
    of every worker process, queue depths of ``hypha.queues()`` and agents by phase."""
    install(hypha.celery, HyphaCollector(hypha.celery, hypha.queues, hypha.store))


__all__ = ["HyphaCollector", "PrometheusMiddleware", "export", "queue_depths"]
