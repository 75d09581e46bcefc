"""pytest-celery's setup API (``CeleryTestSetup`` with broker, backend and worker clusters)
on local processes, no Docker: load it with ``pytest_plugins =
["hypha_celery.testing.celery_setup"]`` (needs ``pip install pytest-celery``).

It overrides pytest-celery's ``celery_broker_cluster``, ``celery_backend_cluster``,
``celery_worker_cluster`` and ``celery_setup_app`` fixtures: the broker is
``HYPHA_TEST_BROKER_URL`` (skipped when unset; failed under ``CI=true``), the result backend
``HYPHA_TEST_RESULT_BACKEND`` or the broker, the worker the ``hypha_worker`` process of
your app, and ``celery_setup.app`` is that app's Celery app (``hypha_worker.client``).
pytest-celery's Docker vendors stay available, opt-in: a test marked ``hypha_docker``
gets its containers instead (a Docker engine needed).
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

try:
    from pytest_celery import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        CeleryBackendCluster,
        CeleryBrokerCluster,
        CeleryTestBackend,
        CeleryTestBroker,
        CeleryTestWorker,
        CeleryWorkerCluster,
    )
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("hypha_celery.testing.celery_setup needs pytest-celery: "
                      "pip install pytest-celery") from exc

from hypha_celery.testing.worker import WorkerProcess

DOCKER_MARK = "hypha_docker"


class LocalService:
    """What pytest-celery's nodes ask of a container, for a service at a URL that this
    machine already runs (a local Redis or RabbitMQ): always ready, nothing to stop."""

    status = "running"

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        self.id = f"local-{name}"
        self.celeryconfig = {"url": url, "host_url": url}

    def ready(self) -> bool:
        return True

    def logs(self) -> str:
        return ""

    def reload(self) -> None:
        return None

    def restart(self, **_: Any) -> None:
        return None

    def kill(self, signal: str | int = "SIGKILL") -> None:
        raise NotImplementedError(f"{self.name} is a service of this machine, not ours to kill")

    def teardown(self) -> None:
        return None


class LocalWorkerContainer:
    """A :class:`~hypha_celery.testing.WorkerProcess` as pytest-celery's worker container."""

    def __init__(self, worker: WorkerProcess) -> None:
        self.worker = worker
        self.name = worker.name
        self.id = worker.name.split("@")[0]
        self.celeryconfig = {"url": worker.settings.broker_url,
                             "host_url": worker.settings.broker_url}

    @property
    def status(self) -> str:
        proc = self.worker.proc
        return "running" if proc is not None and proc.poll() is None else "exited"

    def ready(self) -> bool:
        return self.status == "running"

    def logs(self) -> str:
        return self.worker.log(chars=1_000_000)

    def version(self) -> str:
        import celery

        return str(celery.__version__)

    def log_level(self) -> str:
        return self.worker.argv[self.worker.argv.index("-l") + 1]

    def worker_name(self) -> str:
        return self.worker.name.split("@")[0]

    def worker_queue(self) -> str:
        return self.worker.argv[self.worker.argv.index("-Q") + 1].split(",")[0]

    def kill(self, signal: str | int = "SIGKILL") -> None:
        if self.worker.proc is not None:
            self.worker.proc.send_signal(_signum(signal))

    def reload(self) -> None:
        return None

    def restart(self, **_: Any) -> None:
        if self.worker.proc is not None and self.worker.proc.poll() is None:
            self.worker.proc.terminate()
            self.worker.proc.wait(20)
        self.worker.start()

    def teardown(self) -> None:
        return None  # the hypha_worker fixture stops the process


def _signum(value: str | int) -> int:
    return int(value) if isinstance(value, int) else int(getattr(signal, value))


def _docker(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker(DOCKER_MARK) is not None


@pytest.fixture
def celery_broker_cluster(request: pytest.FixtureRequest) -> CeleryBrokerCluster:
    """The broker at ``HYPHA_TEST_BROKER_URL`` (pytest-celery's container: ``hypha_docker``)."""
    if _docker(request):
        return CeleryBrokerCluster(request.getfixturevalue("celery_broker"))
    url = request.getfixturevalue("hypha_broker_url")
    return CeleryBrokerCluster(CeleryTestBroker(LocalService(url, "broker")))


@pytest.fixture
def celery_backend_cluster(request: pytest.FixtureRequest) -> CeleryBackendCluster:
    """The worker's result backend (pytest-celery's container: ``hypha_docker``)."""
    if _docker(request):
        return CeleryBackendCluster(request.getfixturevalue("celery_backend"))
    worker: WorkerProcess = request.getfixturevalue("hypha_worker")
    url = worker.settings.result_backend
    return CeleryBackendCluster(CeleryTestBackend(LocalService(url, "backend")))


@pytest.fixture
def celery_worker_cluster(request: pytest.FixtureRequest) -> CeleryWorkerCluster:
    """The ``hypha_worker`` process of your app (pytest-celery's container:
    ``hypha_docker``)."""
    if _docker(request):
        return CeleryWorkerCluster(request.getfixturevalue("celery_worker"))
    worker: WorkerProcess = request.getfixturevalue("hypha_worker")
    return CeleryWorkerCluster(CeleryTestWorker(LocalWorkerContainer(worker),
                                                app=worker.client.celery))


@pytest.fixture
def celery_setup_app(request: pytest.FixtureRequest) -> Any:
    """The Celery app of your Hypha (``hypha_worker.client.celery``); pytest-celery's
    app with ``hypha_docker``."""
    if _docker(request):
        setup_cls = request.getfixturevalue("celery_setup_cls")
        return setup_cls.create_setup_app(request.getfixturevalue("celery_setup_config"),
                                          request.getfixturevalue("celery_setup_name"))
    worker: WorkerProcess = request.getfixturevalue("hypha_worker")
    return worker.client.celery
