"""The app of the beat-singleton test: ``Hypha.from_env()`` whose every sweep that
really runs appends ``"<start> <end>"`` (wall clock) to the Redis list :data:`SWEEPS`
on the broker's database, taking :data:`SWEEP_SECONDS` so that overlaps would show."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from hypha_celery import Hypha

SWEEPS = "hypha-test:sweeps"
SWEEP_SECONDS = 0.15

hypha = Hypha.from_env()
celery = hypha.celery
_client: list[redis.Redis] = []


def _record(now: float, grace: float, kickoff_lease: float, limit: int) -> list[Any]:
    start = time.time()
    time.sleep(SWEEP_SECONDS)
    if not _client:
        _client.append(redis.Redis.from_url(os.environ["HYPHA_BROKER_URL"]))
    _client[0].rpush(SWEEPS, f"{start} {time.time()}")
    return []


hypha._rt.sweeps.append(_record)  # counted by the test: one entry per sweep that ran
