"""Real ``celery worker`` processes (prefork) on real Redis / RabbitMQ + PostgreSQL.

Queue names are fixed, so a worker would take any message on its broker's
queues: each worker family therefore gets a broker of its own. The session
claims two Redis databases no other test session uses (see ``claim_db``) and,
where ``rabbitmqctl`` works, a private RabbitMQ vhost:

* ``shared``: broker of the shared Redis worker (``redis_stack``, one per
  package) and result backend of the shared RabbitMQ worker (``rabbit_stack``);
* ``dedicated``: broker and result backend of the workers a test starts for
  itself (duplicate delivery, threads pool, module form), one at a time,
  emptied before each (``dedicated``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass

import pytest

from tests.integration.helpers import (
    Backends,
    Stack,
    claim_db,
    clear_db,
    rabbit_vhost,
    release_db,
    stack,
)


@dataclass(frozen=True)
class RedisDbs:
    shared: str
    dedicated: str


@pytest.fixture(scope="session")
def itest_redis(redis_base: str) -> Iterator[RedisDbs]:
    token = uuid.uuid4().hex
    shared = claim_db(redis_base, token)
    try:
        dedicated = claim_db(redis_base, token, skip=[shared])
    except BaseException:
        release_db(shared, token)
        raise
    try:
        yield RedisDbs(shared, dedicated)
    finally:
        release_db(shared, token)
        release_db(dedicated, token)


@pytest.fixture(scope="package")
def redis_stack(itest_redis: RedisDbs, pg_url: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    url = itest_redis.shared
    log = tmp_path_factory.mktemp("redis-worker") / "worker.log"
    with stack(Backends("redis", url, url, pg_url), log) as s:
        yield s


@pytest.fixture(scope="package")
def rabbit_stack(itest_redis: RedisDbs, amqp_url: str, pg_url: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    log = tmp_path_factory.mktemp("rabbit-worker") / "worker.log"
    with rabbit_vhost(amqp_url) as broker, \
            stack(Backends("rabbitmq", broker, itest_redis.shared, pg_url), log) as s:
        yield s


@pytest.fixture(params=["redis", "rabbitmq"])
def any_stack(request: pytest.FixtureRequest) -> Stack:
    """The shared prefork worker of each broker (RabbitMQ: Redis result backend)."""
    name = "rabbit_stack" if request.param == "rabbitmq" else "redis_stack"
    s: Stack = request.getfixturevalue(name)
    return s


Dedicated = Callable[..., AbstractContextManager[Stack]]


@pytest.fixture
def dedicated(itest_redis: RedisDbs, pg_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Dedicated:
    """``with dedicated(pool=..., duplicate=..., env=...) as s:`` a worker alone on its
    Redis database (broker and result backend), emptied first."""

    def start(**kwargs: object) -> AbstractContextManager[Stack]:
        url = itest_redis.dedicated
        clear_db(url)
        log = tmp_path_factory.mktemp("dedicated-worker") / "worker.log"
        return stack(Backends("redis", url, url, pg_url), log, **kwargs)  # type: ignore[arg-type]

    return start
