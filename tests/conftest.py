"""Shared fixtures: real Redis / PostgreSQL / RabbitMQ (see tests/services.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hypha_celery.store import EventStore
from tests import services

pytest_plugins = ("celery.contrib.pytest",)

#: Celery's Redis result backend unsubscribes from a task's results when the AsyncResult
#: is garbage-collected (``AsyncResult.__del__``), reconnecting its pubsub if need be, so a
#: test process that published tasks keeps Redis connections in objects it no longer
#: reaches; when such a cycle is collected, its socket's finalizer may run before redis-py's
#: connection closes it: "unclosed <socket ... raddr=('127.0.0.1', 6379)>", raised at
#: whatever test the collector happens to run in (not the one that dropped it). Only that
#: warning, for the shared Redis only, is ignored; every other unclosed socket still fails.
REDIS_SOCKET_COLLECTED = (r"ignore:unclosed <socket\.socket [^>]*raddr=\('127\.0\.0\.1', 6379\)>"
                          ":ResourceWarning")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", REDIS_SOCKET_COLLECTED)


# Tests must never pick up a developer's environment.
for _var in ("HYPHA_BROKER_URL", "HYPHA_RESULT_BACKEND", "HYPHA_STORE_URL"):
    os.environ.pop(_var, None)


@pytest.fixture(scope="session")
def redis_base() -> Iterator[str]:
    with services.redis_server() as url:
        if url is None:
            services.unavailable("Redis (127.0.0.1:6379 or a redis-server binary)")
        assert url is not None
        yield url


@pytest.fixture(scope="session")
def redis_url(redis_base: str) -> Iterator[str]:
    """A Redis URL on a database claimed for this test session (emptied first): another
    test session on the same server (a second checkout, CI) never shares it."""
    from tests.integration.helpers import claim_db, release_db

    token = uuid.uuid4().hex
    url = claim_db(redis_base, token, first=9)
    try:
        yield url
    finally:
        release_db(url, token)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    with services.postgres_server() as url:
        if url is None:
            services.unavailable("PostgreSQL (127.0.0.1:5432, database 'test')")
        assert url is not None
        yield url


@pytest.fixture(scope="session")
def amqp_url() -> str:
    url = services.rabbitmq_url()
    if url is None:
        services.unavailable("RabbitMQ (127.0.0.1:5672)")
    assert url is not None
    return url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hypha.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Contract tests run once per store backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hypha.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def store(store_url: str) -> Iterator[EventStore]:
    """A migrated store on each backend (PostgreSQL: the session's database)."""
    yield from migrated(store_url)


def migrated(url: str) -> Iterator[EventStore]:
    """A migrated :class:`EventStore` at ``url``, disposed afterwards (for fixtures)."""
    s = EventStore(url)
    s.migrate()
    yield s
    s.dispose()


@pytest.fixture(autouse=True)
def _no_process_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """``hypha worker`` on gevent's pool replaces its process (``os.execv``): invoked in
    this one, it would replace the test run. A test that means it records it instead."""
    from hypha_celery.cli import worker

    def refuse(argv: list[str]) -> None:
        raise AssertionError(f"a test would have replaced the test process: {argv[:3]}")

    monkeypatch.setattr(worker, "replace_process", refuse)
