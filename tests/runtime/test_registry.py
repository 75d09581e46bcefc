"""No service locator on the Celery app: what tasks need is bound explicitly."""

from __future__ import annotations

from typing import Any

from hypha_celery import Hypha, Settings
from hypha_celery.runtime.config import CONSUMER, SUPERVISOR_TASK
from hypha_celery.runtime.consumer import HyphaConsumer


def embedded(store_url: str, **settings: Any) -> Hypha:
    return Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                          store_url=store_url, embedded=True, **settings))


def test_nothing_is_stashed_on_the_celery_app(sqlite_url: str) -> None:
    hypha = embedded(sqlite_url)
    try:
        assert not hasattr(hypha.celery, "hypha_store")
        assert not hasattr(hypha.celery, "hypha_agents")
        assert SUPERVISOR_TASK in hypha.celery.tasks  # registered by beat, bound to the runtime
        # the agents' and the bus's parts of the supervisor's sweep, bound to the runtime
        assert [getattr(s, "func", s).__module__ for s in hypha._rt.sweeps] == [
            "hypha_celery.agents.recovery", "hypha_celery.bus._agents"]
    finally:
        hypha.close()


def test_the_worker_consumer_holds_the_store(sqlite_url: str) -> None:
    hypha = embedded(sqlite_url)
    try:
        consumer = hypha.celery.conf.worker_consumer
        assert issubclass(consumer, HyphaConsumer) and consumer.store is hypha.store
        assert HyphaConsumer.store is None  # the profile's class itself stays unbound
    finally:
        hypha.close()


def test_an_overridden_consumer_is_left_alone(sqlite_url: str) -> None:
    mine = "tests.runtime.custom:Consumer"
    hypha = embedded(sqlite_url, celery_overrides={"worker_consumer": mine})
    try:
        assert hypha.celery.conf.worker_consumer == mine != CONSUMER
    finally:
        hypha.close()
