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
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.helpers import (
    Backends,
    Stack,
    claim_db,
    clear_db,
    rabbit_vhost,
    release_db,
    release_pools,
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
        release_pools()  # every worker and client of this package is gone by now


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
def dedicated(itest_redis: RedisDbs, pg_url: str, tmp_path_factory: pytest.TempPathFactory,
              request: pytest.FixtureRequest) -> Iterator[Dedicated]:
    """``with dedicated(broker=..., pool=..., duplicate=..., env=...) as s:`` a worker
    alone on its broker: the ``dedicated`` Redis database (also the result backend),
    emptied first, or with ``broker="rabbitmq"`` a fresh RabbitMQ vhost."""
    with ExitStack() as cleanup:

        def start(broker: str = "redis", **kwargs: Any) -> AbstractContextManager[Stack]:
            url = itest_redis.dedicated
            clear_db(url)
            if broker == "rabbitmq":
                amqp_url = str(request.getfixturevalue("amqp_url"))
                broker_url = cleanup.enter_context(rabbit_vhost(amqp_url))
            else:
                broker_url = url
            log = tmp_path_factory.mktemp("dedicated-worker") / "worker.log"
            return stack(Backends(broker, broker_url, url, pg_url), log, **kwargs)

        yield start
