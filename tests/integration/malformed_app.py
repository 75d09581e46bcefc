"""A minimal hypha-like app for the failure-semantics tests, run in real workers::

    celery -A tests.integration.malformed_app:celery worker -P prefork -c 1 -Q hypha.nodes

hypha's Celery profile (``celery_config(Settings.from_env())``: JSON only,
:class:`~hypha_celery.runtime.consumer.HyphaConsumer`, quorum queues on RabbitMQ), the
consumer bound to the event store (``consumer.bind``) as :class:`~hypha_celery.Hypha`
does; no graphs. Tasks:

* :data:`GOOD_TASK` appends its argument to the Redis list :data:`GOOD_KEY` on the
  result backend's database (the test's side channel);
* :data:`CRASH_TASK` kills its pool process (``os._exit(1)``) after counting the
  delivery in :data:`CRASH_KEY`: a poison message (acks_late, reject_on_worker_lost);
* :data:`FLAKY_TASK` records each attempt in ``FLAKY_KEY + token`` and retries with
  ``countdown`` until its third attempt (retries on quorum queues);
* :data:`FRAGILE_TASK` never runs: its Celery strategy (the consumer-side handler)
  raises, as a Celery bug on an odd message would.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

from hypha_celery.runtime import consumer
from hypha_celery.runtime.config import Settings, celery_config
from hypha_celery.store import EventStore

GOOD_TASK = "malformed_app.good"
CRASH_TASK = "malformed_app.crash"
GOOD_KEY = "malformed_app:good"
CRASH_KEY = "malformed_app:crash"
FRAGILE_TASK = "malformed_app.fragile"
FLAKY_TASK = "malformed_app.flaky"
FLAKY_KEY = "malformed_app:flaky:"

#: The worker's bound of a message body, small so a test message passes it cheaply.
MAX_MESSAGE_BYTES = 65_536

celery = Celery("malformed_app")
celery.config_from_object(celery_config(Settings.from_env()))
if "HYPHA_STORE_URL" in os.environ:  # a worker (the tests import this module for its names)
    consumer.bind(celery, EventStore(os.environ["HYPHA_STORE_URL"]), MAX_MESSAGE_BYTES)


def _side() -> redis.Redis:
    return redis.Redis.from_url(os.environ["HYPHA_RESULT_BACKEND"])


@celery.task(name=GOOD_TASK, acks_late=True, ignore_result=True, shared=False)
def good(value: str) -> None:
    with _side() as side:
        side.rpush(GOOD_KEY, value)


@celery.task(name=CRASH_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             shared=False)
def crash(token: str) -> None:
    with _side() as side:
        side.rpush(CRASH_KEY, token)
    os._exit(1)


@celery.task(name=FLAKY_TASK, bind=True, acks_late=True, max_retries=5, ignore_result=True,
             shared=False)
def flaky(self: Any, token: str, countdown: float) -> None:
    with _side() as side:
        attempts = side.rpush(FLAKY_KEY + token, time.time())
    if attempts < 3:
        raise self.retry(countdown=countdown)


def explode(task: Any, app: Any, consumer: Any, **kwargs: Any) -> Any:
    """A Celery task strategy (``Task.Strategy``) whose handler raises."""

    def handler(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any,
                **kw: Any) -> None:
        raise RuntimeError("the strategy failed")

    return handler


@celery.task(name=FRAGILE_TASK, Strategy=f"{__name__}:explode", ignore_result=True,
             shared=False)
def fragile() -> None:
    raise AssertionError("never runs")
