"""The worker app of the scrape test::

    HYPHA_METRICS_PORT=9464 celery -A tests.metrics.worker_app:celery worker -P prefork -c 2

The demo graph, :class:`PrometheusMiddleware` and :func:`export` (the worker serves
``/metrics``). Imported by the worker only: the test's client is a plain ``Hypha``."""

from __future__ import annotations

from hypha_celery import Hypha
from hypha_celery.demo import demo_graph
from hypha_celery.metrics import PrometheusMiddleware, export

hypha = Hypha.from_env(middleware=[PrometheusMiddleware()])
hypha.register(demo_graph())
export(hypha)
celery = hypha.celery
