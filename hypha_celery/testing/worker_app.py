"""The Celery app a :class:`~hypha_celery.testing.WorkerProcess` runs::

    celery -A hypha_celery.testing.worker_app:celery worker ...

``HYPHA_TEST_APP`` names the user's builder, ``MODULE:ATTR``, a callable
``build(settings) -> Hypha``; it is called with ``Settings.from_env()`` (the worker's
``HYPHA_BROKER_URL``, ``HYPHA_RESULT_BACKEND``, ``HYPHA_STORE_URL``).
"""

from __future__ import annotations

import os
from typing import Any

from hypha_celery.client.hypha import Hypha
from hypha_celery.loading import load_object
from hypha_celery.runtime.config import Settings

_build: Any = load_object(os.environ["HYPHA_TEST_APP"], option="HYPHA_TEST_APP")
hypha: Hypha = _build(Settings.from_env())
celery = hypha.celery
