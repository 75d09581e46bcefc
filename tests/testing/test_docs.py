"""docs/testing.md's pytest files run as a user's suite would (pytester): its app module
(the first Python block, up to ``# production``), its ini and its test files."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pytest_examples import CodeExample, find_examples

from tests import services

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
INI = "[pytest]\nfilterwarnings = error\nhypha_worker_app = myapp:build\n"


def blocks() -> dict[str, str]:
    """The doc's Python blocks by the file name their first line gives (``# name.py``)."""
    found: dict[str, str] = {}
    for example in find_examples(DOC):
        example: CodeExample
        first, _, rest = example.source.partition("\n")
        if first.startswith("# ") and first.endswith(".py"):
            found[first[2:]] = rest
    return found


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    files = blocks()
    pytester.makeini(INI)
    pytester.makepyfile(myapp=files["myapp.py"].split("\n# production")[0])
    return pytester


def test_the_doc_has_its_files() -> None:
    assert {"myapp.py", "test_myapp.py", "test_myapp_worker.py", "conftest.py",
            "test_myapp_celery.py", "test_myapp_models.py"} <= set(blocks())
    assert "hypha_worker_app = myapp:build" in DOC.read_text()


def test_embedded_tests_of_the_doc_pass(project: pytest.Pytester) -> None:
    project.makepyfile(test_myapp=blocks()["test_myapp.py"])
    project.runpytest_subprocess("-q").assert_outcomes(passed=2)


def test_model_server_tests_of_the_doc_pass(project: pytest.Pytester) -> None:
    project.makepyfile(test_myapp_models=blocks()["test_myapp_models.py"])
    project.runpytest_subprocess("-q").assert_outcomes(passed=3)


@pytest.mark.services
def test_worker_test_of_the_doc_passes(project: pytest.Pytester, redis_url: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPHA_TEST_BROKER_URL", redis_url)
    project.makepyfile(test_myapp_worker=blocks()["test_myapp_worker.py"])
    project.runpytest_subprocess("-q").assert_outcomes(passed=1)


@pytest.mark.services
def test_celery_setup_test_of_the_doc_passes(project: pytest.Pytester, redis_url: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("pytest_celery") is None:  # never imported here
        services.unavailable("pytest-celery (the dev extra)")
    monkeypatch.setenv("HYPHA_TEST_BROKER_URL", redis_url)
    project.makeconftest(blocks()["conftest.py"])
    project.makepyfile(test_myapp_celery=blocks()["test_myapp_celery.py"])
    project.runpytest_subprocess("-q").assert_outcomes(passed=1)
