"""Real ``celery worker`` processes (prefork) on real Redis / RabbitMQ + PostgreSQL.

Each worker family gets a Redis database of its own, so a worker never takes
messages meant for another (the shared queue names are fixed):

* db 11: the shared Redis-broker worker (``redis_stack``, one per package);
* db 12: result backend of the shared RabbitMQ-broker worker (``rabbit_stack``);
* db 13: dedicated workers a test starts for itself (duplicate delivery, threads
  pool, module form), one at a time, flushed each time (``dedicated``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest

from tests.integration.helpers import Backends, Stack, flushed_db, stack

SHARED_DB, RABBIT_BACKEND_DB, DEDICATED_DB = 11, 12, 13


@pytest.fixture(scope="package")
def redis_stack(redis_base: str, pg_url: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    url = flushed_db(redis_base, SHARED_DB)
    log = tmp_path_factory.mktemp("redis-worker") / "worker.log"
    with stack(Backends("redis", url, url, pg_url), log) as s:
        yield s


@pytest.fixture(scope="package")
def rabbit_stack(redis_base: str, amqp_url: str, pg_url: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    backend = flushed_db(redis_base, RABBIT_BACKEND_DB)
    log = tmp_path_factory.mktemp("rabbit-worker") / "worker.log"
    with stack(Backends("rabbitmq", amqp_url, backend, pg_url), log) as s:
        yield s


@pytest.fixture(params=["redis", "rabbitmq"])
def any_stack(request: pytest.FixtureRequest) -> Stack:
    """The shared prefork worker of each broker (RabbitMQ: Redis result backend)."""
    return request.getfixturevalue(f"{'rabbit' if request.param == 'rabbitmq' else 'redis'}"
                                   "_stack")


Dedicated = Callable[..., AbstractContextManager[Stack]]


@pytest.fixture
def dedicated(redis_base: str, pg_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Dedicated:
    """``with dedicated(pool=..., duplicate=..., env=...) as s:`` a worker of its own on
    a freshly flushed Redis database (broker and result backend)."""

    def start(**kwargs: object) -> AbstractContextManager[Stack]:
        url = flushed_db(redis_base, DEDICATED_DB)
        log = tmp_path_factory.mktemp("dedicated-worker") / "worker.log"
        return stack(Backends("redis", url, url, pg_url), log, **kwargs)  # type: ignore[arg-type]

    return start
