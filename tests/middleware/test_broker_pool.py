"""A worker running its tasks side by side on a Redis broker gets connection pools as large
as its concurrency; any other worker's broker settings are left as they are."""

from __future__ import annotations

import pytest
from celery import Celery
from celery.concurrency import get_implementation

from hypha_celery.middleware import _broker_pool
from hypha_celery.middleware._broker_pool import HEADROOM, fit, side_by_side

REDIS = "redis://127.0.0.1:6379/15"  # never connected: the transport's type is read only


def app(broker: str, **options: object) -> Celery:
    celery = Celery("fit", broker=broker, set_as_current=False)
    celery.conf.broker_transport_options = {"visibility_timeout": 60, **options}
    return celery


def eventlets() -> type:
    """Celery's eventlet pool class by its name alone (eventlet is not installed)."""
    return type("TaskPool", (), {"__module__": "celery.concurrency.eventlet"})


@pytest.mark.parametrize(("pool", "expected"), [
    ("threads", True), ("gevent", True), ("prefork", False), ("solo", False)])
def test_side_by_side_knows_celerys_pools(pool: str, expected: bool) -> None:
    assert side_by_side(get_implementation(pool)) is expected
    assert side_by_side(eventlets())


@pytest.mark.parametrize("pool", ["threads", "gevent"])
def test_a_side_by_side_pool_on_redis_gets_concurrency_plus_headroom(pool: str) -> None:
    celery = app(REDIS)
    assert fit(celery, get_implementation(pool), 1000) == 1000 + HEADROOM
    assert celery.conf.broker_transport_options == {"visibility_timeout": 60,
                                                    "max_connections": 1000 + HEADROOM}


def test_what_the_settings_give_is_kept() -> None:
    celery = app(REDIS, max_connections=50)
    assert fit(celery, get_implementation("threads"), 1000) is None
    assert celery.conf.broker_transport_options["max_connections"] == 50


@pytest.mark.parametrize(("broker", "pool"), [
    (REDIS, "prefork"), (REDIS, "solo"), ("amqp://guest@127.0.0.1//", "threads"),
    ("memory://", "threads")])
def test_other_workers_are_left_alone(broker: str, pool: str) -> None:
    celery = app(broker)
    assert fit(celery, get_implementation(pool), 1000) is None
    assert celery.conf.broker_transport_options == {"visibility_timeout": 60}


def test_kombus_default_is_what_the_headroom_keeps() -> None:
    """HEADROOM is kombu's own default pool size (the Redis channel's ``max_connections``):
    this fails when kombu changes it, so the headroom is looked at again."""
    from kombu.transport.redis import Channel

    assert Channel.max_connections == HEADROOM == _broker_pool.HEADROOM
