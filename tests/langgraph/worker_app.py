"""The worker app of the differential tests::

    celery -A tests.langgraph.worker_app:celery worker

``Hypha.from_env()`` with every graph of :mod:`tests.langgraph.graphs` distributed.
Imported by the worker only."""

from __future__ import annotations

from hypha_celery import Hypha
from tests.langgraph.graphs import distribute_all

hypha = Hypha.from_env()
graphs = distribute_all(hypha)
celery = hypha.celery
