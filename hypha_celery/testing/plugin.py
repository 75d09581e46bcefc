"""The ``hypha`` pytest plugin: fixtures for testing your graphs and agents.

Installed with hypha-celery (entry point ``pytest11: hypha``); every fixture name starts
with ``hypha_``. See docs/testing.md.

* ``hypha_store_url``: a fresh store per test: a SQLite file in ``tmp_path``, or with
  ``HYPHA_TEST_STORE_URL`` (a PostgreSQL URL whose user may create databases) a new
  database on that server, dropped afterwards.
* ``hypha_factory(middleware=(), **settings)``: embedded ``Hypha`` instances on that
  store (memory broker, in-process worker thread), closed after the test.
* ``hypha_embedded``: one such ``Hypha``.
* ``hypha_mock_backend``: the ``MockBackend`` class; the callable scripts registered during the
  test are dropped afterwards.
* ``hypha_broker_url``: ``HYPHA_TEST_BROKER_URL`` (Redis or RabbitMQ); the test is skipped
  when it is not set, and fails instead under ``CI=true`` (a CI run that skips its worker
  tests tests nothing).
* ``hypha_worker_app``: ``MODULE:ATTR`` of your ``build(settings) -> Hypha``: the ini
  option ``hypha_worker_app`` or ``HYPHA_TEST_WORKER_APP``, or override the fixture.
* ``hypha_worker``: a real ``celery worker`` process of that app on that broker and store
  (result backend: ``HYPHA_TEST_RESULT_BACKEND``, else the broker URL), started and
  stopped per test; ``hypha_worker.client`` is the app's ``Hypha`` in the test process.
* ``hypha_openai_server`` / ``hypha_anthropic_server``: a local model server per test
  (:mod:`hypha_celery.testing.llm_server`) speaking OpenAI Responses, Chat Completions and
  Anthropic Messages over real HTTP: ``.base_url`` for the official SDK, ``.script(Reply...)``
  for its answers, ``.requests`` for what it got, ``.env()`` / ``.base_urls`` to point
  hypha's model backends and ``ctx.llm`` at it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hypha_celery.backends.mock import MockBackend
from hypha_celery.client.hypha import Hypha
from hypha_celery.middleware import Middleware
from hypha_celery.testing.llm_server import AnthropicServer, OpenAIServer
from hypha_celery.testing.worker import WorkerProcess, embedded_settings, fresh_store_url

HyphaFactory = Callable[..., Hypha]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("hypha_worker_app", "MODULE:ATTR of the build(settings) -> Hypha that "
                  "the hypha_worker fixture runs in a celery worker process", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hypha_docker: with hypha_celery.testing.celery_setup, "
                            "pytest-celery's Docker containers for this test instead of "
                            "local processes")


@pytest.fixture
def hypha_store_url(tmp_path: Path) -> Iterator[str]:
    """A store URL no other test uses (SQLite, or PostgreSQL with HYPHA_TEST_STORE_URL)."""
    with fresh_store_url(tmp_path, os.environ.get("HYPHA_TEST_STORE_URL") or None) as url:
        yield url


@pytest.fixture
def hypha_factory(hypha_store_url: str) -> Iterator[HyphaFactory]:
    """``make(middleware=(), **settings) -> Hypha``: embedded instances on the test's
    store, closed at the end of the test."""
    made: list[Hypha] = []

    def make(*, middleware: tuple[Middleware, ...] | list[Middleware] = (),
             **settings: Any) -> Hypha:
        hypha = Hypha(embedded_settings(hypha_store_url, **settings), middleware=middleware)
        made.append(hypha)
        return hypha

    yield make
    for hypha in reversed(made):
        hypha.close()


@pytest.fixture
def hypha_embedded(hypha_factory: HyphaFactory) -> Hypha:
    """An embedded Hypha (memory broker, worker thread) on a fresh store."""
    return hypha_factory()


@pytest.fixture
def hypha_mock_backend() -> Iterator[type[MockBackend]]:
    """The MockBackend class (``agents.start(..., backend=hypha_mock_backend)``); callable
    scripts registered during the test are dropped after it."""
    from hypha_celery.backends import mock

    with mock._registry_lock:
        before = set(mock._registry)
    yield MockBackend
    with mock._registry_lock:
        for ref in set(mock._registry) - before:
            del mock._registry[ref]


@pytest.fixture
def hypha_broker_url() -> str:
    """``HYPHA_TEST_BROKER_URL``; skips the test when it is not set (fails it under
    ``CI=true``)."""
    url = os.environ.get("HYPHA_TEST_BROKER_URL", "").strip()
    if not url:
        missing = ("hypha_worker needs a broker: set HYPHA_TEST_BROKER_URL "
                   "(e.g. redis://127.0.0.1:6379/15)")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{missing} (CI=true: a worker test must not skip)")
        pytest.skip(missing)
    return url


@pytest.fixture
def hypha_worker_app(request: pytest.FixtureRequest) -> str:
    """``MODULE:ATTR`` of the ``build(settings) -> Hypha`` a worker process runs."""
    spec = str(request.config.getini("hypha_worker_app") or "").strip() or \
        os.environ.get("HYPHA_TEST_WORKER_APP", "").strip()
    if not spec:
        raise pytest.UsageError("hypha_worker needs your app: set the ini option "
                                "hypha_worker_app = 'MODULE:build' (a build(settings) -> "
                                "Hypha), HYPHA_TEST_WORKER_APP, or override the "
                                "hypha_worker_app fixture")
    return spec


@pytest.fixture
def hypha_worker(hypha_worker_app: str, hypha_broker_url: str, hypha_store_url: str,
                 tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[WorkerProcess]:
    """A real ``celery worker`` process of ``hypha_worker_app`` on ``hypha_broker_url``
    and the test's store; ``.client`` is the app's Hypha in the test process."""
    worker = WorkerProcess(
        hypha_worker_app, broker_url=hypha_broker_url, store_url=hypha_store_url,
        result_backend=os.environ.get("HYPHA_TEST_RESULT_BACKEND") or None,
        log=tmp_path / "hypha-worker.log", cwd=request.config.rootpath)
    try:
        yield worker.start()
    finally:
        worker.stop()


@pytest.fixture
def hypha_openai_server() -> Iterator[OpenAIServer]:
    """A local OpenAI (Responses and Chat Completions) on loopback for this test:
    ``openai.OpenAI(base_url=server.base_url, api_key=server.api_key)``; ``script()``
    its replies, ``requests`` what it got, ``env()`` / ``base_urls`` for hypha."""
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def hypha_anthropic_server() -> Iterator[AnthropicServer]:
    """A local Anthropic (Messages) on loopback for this test:
    ``anthropic.Anthropic(base_url=server.base_url, api_key=server.api_key)``; ``script()``
    its replies, ``requests`` what it got, ``env()`` / ``base_urls`` for hypha."""
    with AnthropicServer() as server:
        yield server
