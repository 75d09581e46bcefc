"""The ``hypha`` pytest plugin (hypha_celery.testing) as a user's test suite sees it: a
small project (an app module and a test file) run by a separate pytest process."""

from __future__ import annotations

import textwrap

import pytest

from hypha_celery.backends import mock

APP = '''
from hypha_celery import Finish, Graph, Hypha, Next


def double(state, x):
    return {"y": x * 2}


def policy(ctx):
    if ctx.step == 0:
        return Next("double", ctx.input)
    return Finish(ctx.state["y"])


def build(settings):
    hypha = Hypha(settings)
    hypha.register(Graph(id="double", nodes={"double": double}, decision_policy=policy,
                         max_steps=5, execution_timeout=30.0, node_timeout=10.0))
    return hypha
'''

EMBEDDED = '''
from hypha_celery.agents import Agent, NoReply
from hypha_celery.backends import BackendEvent
from hypha_celery.testing import wait_until

import myapp


class Echo(Agent):
    def init_agent(self, opts):
        return {"scripts": opts["scripts"]}, {"turns": 0}

    def handle_response(self, ref, response, state):
        return NoReply({"turns": state["turns"] + 1})


def test_graph_runs_embedded(hypha_factory, hypha_store_url):
    hypha = myapp.build(hypha_factory().settings)
    try:
        assert hypha.start("double", 21).wait(timeout=30) == 42
    finally:
        hypha.close()


def test_embedded_fixture(hypha_embedded):
    assert hypha_embedded.settings.embedded
    assert hypha_embedded.settings.broker_url == "memory://"


def test_agent_turn_on_the_mock_backend(hypha_embedded, hypha_mock_backend):
    reply = [BackendEvent.new("text", {"text": "hi"}), BackendEvent.new("result", {})]
    computed = lambda prompt: [BackendEvent.new("text", {"text": prompt.upper()}),
                               BackendEvent.new("result", {})]
    hypha_embedded.agents.start(Echo, name="echo", backend=hypha_mock_backend,
                                scripts=[reply, computed])
    first = hypha_embedded.agents.tell("echo", "one")
    second = hypha_embedded.agents.tell("echo", "two")
    poll = hypha_embedded.agents.poll
    assert wait_until(lambda: poll("echo", first).response).text == "hi"
    assert wait_until(lambda: poll("echo", second).response).text == "TWO"
    wait_until(lambda: hypha_embedded.agents.status("echo").agent_state["turns"] == 2)


def test_stores_are_fresh(hypha_store_url, tmp_path):
    assert str(tmp_path) in hypha_store_url
'''

WORKER = '''
def test_graph_runs_on_a_worker_process(hypha_worker):
    run = hypha_worker.client.start("double", 4)
    assert run.wait(timeout=30) == 8
    assert hypha_worker.proc.poll() is None
    assert "run.completed" in [e.kind for e in run.events()]
'''

POSTGRES = '''
import myapp


def test_a_fresh_database_per_test(hypha_factory, hypha_store_url):
    assert hypha_store_url.startswith("postgresql")
    hypha = myapp.build(hypha_factory().settings)
    try:
        assert hypha.start("double", 5).wait(timeout=30) == 10
        assert len(hypha.store.list_runs()) == 1
    finally:
        hypha.close()


test_another_fresh_database = test_a_fresh_database_per_test
'''

INI = '''
[pytest]
filterwarnings = error
hypha_worker_app = myapp:build
'''


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(textwrap.dedent(INI))
    pytester.makepyfile(myapp=APP)
    return pytester


def test_embedded_fixtures_in_a_users_suite(project: pytest.Pytester) -> None:
    project.makepyfile(test_user=EMBEDDED)
    result = project.runpytest_subprocess("-q")
    result.assert_outcomes(passed=4)


@pytest.mark.services
def test_store_on_postgresql_is_a_fresh_database_per_test(
        project: pytest.Pytester, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPHA_TEST_STORE_URL", pg_url)
    project.makepyfile(test_pg=POSTGRES)
    project.runpytest_subprocess("-q").assert_outcomes(passed=2)


@pytest.mark.services
def test_worker_fixture_runs_a_real_worker(project: pytest.Pytester, redis_url: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPHA_TEST_BROKER_URL", redis_url)
    project.makepyfile(test_worker=WORKER)
    result = project.runpytest_subprocess("-q")
    result.assert_outcomes(passed=1)


def test_worker_fixture_skips_without_a_broker(project: pytest.Pytester,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYPHA_TEST_BROKER_URL", raising=False)
    monkeypatch.delenv("CI", raising=False)
    project.makepyfile(test_worker=WORKER)
    result = project.runpytest_subprocess("-q", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*HYPHA_TEST_BROKER_URL*"])


def test_mock_backend_fixture_drops_the_tests_callable_scripts(
        project: pytest.Pytester) -> None:
    project.makepyfile(test_user=EMBEDDED)
    before = set(mock._registry)
    # -p no:celery: pytest-celery's plugin registers its tasks on import, once a process
    result = project.runpytest_inprocess("-q", "-k", "mock_backend", "-p", "no:celery")
    result.assert_outcomes(passed=1)
    assert set(mock._registry) == before


def test_worker_fixture_fails_without_a_broker_under_ci(project: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``CI=true`` a worker test without a broker fails: a CI run must not pass by
    skipping it."""
    monkeypatch.delenv("HYPHA_TEST_BROKER_URL", raising=False)
    monkeypatch.setenv("CI", "true")
    project.makepyfile(test_worker=WORKER)
    result = project.runpytest_subprocess("-q")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*CI=true: a worker test must not skip*"])
