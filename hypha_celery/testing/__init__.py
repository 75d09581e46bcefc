"""Testing your own graphs and agents: a pytest plugin (``hypha_celery.testing.plugin``,
registered as the ``hypha`` pytest11 entry point) and the helpers behind its fixtures.

Fixtures (docs/testing.md): ``hypha_store_url``, ``hypha_factory``, ``hypha_embedded``,
``hypha_mock_backend``, ``hypha_broker_url``, ``hypha_worker_app`` and ``hypha_worker``;
:func:`wait_until` to wait on a condition.
"""

from __future__ import annotations

from hypha_celery.testing.waiting import wait_until
from hypha_celery.testing.worker import (
    WorkerProcess,
    embedded_settings,
    fresh_store_url,
    start_worker,
)

__all__ = ["WorkerProcess", "embedded_settings", "fresh_store_url", "start_worker",
           "wait_until"]
