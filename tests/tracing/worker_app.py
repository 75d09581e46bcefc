"""The worker app of the cross-process tracing test::

    HYPHA_TEST_SPANS=/tmp/spans.jsonl celery -A tests.tracing.worker_app:celery worker

The demo graph, the graph that calls a tool and a model (``tests.tracing.graphs``: the
model server's URL in ``HYPHA_MODEL_BASE_URLS``) and :class:`TracingMiddleware` on a
provider whose exporter appends each finished span to ``HYPHA_TEST_SPANS`` as a JSON line
(with the exporting process's pid).
Imported by the worker only."""

from __future__ import annotations

import os

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from hypha_celery import Hypha
from hypha_celery.demo import demo_graph
from hypha_celery.tracing import TracingMiddleware
from tests.tracing.graphs import calls_graph
from tests.tracing.spans import JsonLines

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(JsonLines(os.environ["HYPHA_TEST_SPANS"])))
hypha = Hypha.from_env(middleware=[TracingMiddleware(provider)])
hypha.register(demo_graph())
hypha.register(calls_graph())
celery = hypha.celery
