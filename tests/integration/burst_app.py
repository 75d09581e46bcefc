"""An application whose one task ends at a moment it is given, so that a burst of them
ends at once, each acknowledged late from its own greenlet::

    hypha worker --app tests.integration.burst_app:hypha --profile io

Settings come from the environment (HYPHA_BROKER_URL, HYPHA_RESULT_BACKEND,
HYPHA_STORE_URL), as in :mod:`tests.integration.agents_app`.
"""

from __future__ import annotations

import time

from hypha_celery import Hypha, Settings

hypha = Hypha(Settings.from_env())
celery = hypha.celery
END_AT = "tests.burst.end_at"


@celery.task(name=END_AT, acks_late=True)
def end_at(at: float) -> str:
    """Wait until the wall-clock time ``at`` (a greenlet's sleep), then end."""
    time.sleep(max(0.0, at - time.time()))
    return "ended"
