"""pytest-celery's setup API on local processes (hypha_celery.testing.celery_setup): a
user's suite whose tests take ``celery_setup`` runs with no Docker engine."""

from __future__ import annotations

import importlib.util

import pytest

from tests import services
from tests.testing.test_plugin import APP, INI

CONFTEST = 'pytest_plugins = ["hypha_celery.testing.celery_setup"]\n'

SETUP = '''
import pytest
from pytest_celery import CeleryTestSetup


def test_celery_setup_is_local(celery_setup: CeleryTestSetup, hypha_worker):
    assert celery_setup.ready(ping=False, control=True, docker=True)
    assert celery_setup.app is hypha_worker.client.celery
    assert celery_setup.worker.worker_name in hypha_worker.name
    assert celery_setup.worker.container.status == "running"
    assert celery_setup.broker.config()["url"] == hypha_worker.settings.broker_url
    assert celery_setup.backend.config()["url"] == hypha_worker.settings.result_backend
    assert hypha_worker.client.start("double", 3).wait(timeout=30) == 6


@pytest.mark.hypha_docker
def test_docker_is_opt_in(request):
    assert request.node.get_closest_marker("hypha_docker") is not None
'''


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    # Never imported here: its shared tasks would join every Celery app made after.
    if importlib.util.find_spec("pytest_celery") is None:
        services.unavailable("pytest-celery (the dev extra)")
    pytester.makeini(INI)
    pytester.makepyfile(myapp=APP)
    pytester.makeconftest(CONFTEST)
    return pytester


@pytest.mark.services
def test_celery_setup_on_a_local_worker_and_broker(project: pytest.Pytester, redis_url: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPHA_TEST_BROKER_URL", redis_url)
    project.makepyfile(test_setup=SETUP)
    project.runpytest_subprocess("-q").assert_outcomes(passed=2)


def test_celery_setup_skips_without_a_broker(project: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYPHA_TEST_BROKER_URL", raising=False)
    monkeypatch.delenv("CI", raising=False)
    project.makepyfile(test_setup=SETUP)
    result = project.runpytest_subprocess("-q", "-k", "local", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*HYPHA_TEST_BROKER_URL*"])
