"""The worker app of the durability tests::

    celery -A tests.langgraph.durable_app:celery worker

``Hypha.from_env()`` with every graph of :mod:`tests.langgraph.durable_graphs`
distributed (with its node options). Imported by the worker only."""

from __future__ import annotations

from hypha_celery import Hypha
from tests.langgraph.durable_graphs import distribute_all

hypha = Hypha.from_env()
graphs = distribute_all(hypha)
celery = hypha.celery

__all__ = ["celery", "graphs", "hypha"]
