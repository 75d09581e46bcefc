"""``hypha worker`` builds the Celery worker command line from the app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hypha_celery import Finish, Graph, Hypha, Node, Settings
from hypha_celery.cli.worker import parse_queues, worker_argv
from hypha_celery.errors import SetupError


def _hypha(embedded: bool) -> Hypha:
    broker = "memory://" if embedded else "redis://127.0.0.1:1/0"
    return Hypha(Settings(broker, "cache+memory://" if embedded else broker, "sqlite://",
                          embedded))


@pytest.fixture
def hypha() -> Iterator[Hypha]:
    app = _hypha(embedded=False)
    app.register(Graph("g", {"a": lambda s, i: {}, "gpu": Node(lambda s, i: {}, queue="gpu")},
                       lambda ctx: Finish(None)))
    yield app
    app.close()


def test_defaults_consume_every_queue_of_the_app_with_task_events(hypha: Hypha) -> None:
    argv = worker_argv(hypha)
    assert argv[0] == "worker"
    assert "--pool=prefork" in argv
    assert "--task-events" in argv
    assert "--queues=gpu,hypha.agents,hypha.coordinator,hypha.effects,hypha.io,hypha.nodes" in argv
    assert not any(a.startswith("--concurrency") for a in argv)


def test_options_and_pass_through(hypha: Hypha) -> None:
    argv = worker_argv(hypha, queues=["gpu"], pool="threads", concurrency=3, loglevel="DEBUG",
                       extra=["--hostname=w1@%h"])
    assert argv == ["worker", "--pool=threads", "--queues=gpu", "--task-events",
                    "--loglevel=DEBUG", "--concurrency=3", "--hostname=w1@%h"]


def test_bad_options_and_the_embedded_default_are_refused(hypha: Hypha) -> None:
    with pytest.raises(SetupError, match="--pool"):
        worker_argv(hypha, pool="eventlet")
    with pytest.raises(SetupError, match="--concurrency"):
        worker_argv(hypha, concurrency=0)
    embedded = _hypha(embedded=True)
    with pytest.raises(SetupError, match="HYPHA_BROKER_URL"):
        worker_argv(embedded)
    embedded.close()


def test_parse_queues() -> None:
    assert parse_queues(None) is None
    assert parse_queues(" , ") is None
    assert parse_queues("a, b,,c") == ["a", "b", "c"]


def test_the_io_profile_runs_agents_and_io_on_500_greenlets(hypha: Hypha) -> None:
    argv = worker_argv(hypha, profile_name="io")
    assert argv == ["worker", "--pool=gevent", "--queues=hypha.agents,hypha.io",
                    "--task-events", "--loglevel=INFO", "--concurrency=1000"]
    tuned = worker_argv(hypha, profile_name="io", concurrency=50, queues=["hypha.io"])
    assert "--concurrency=50" in tuned and "--queues=hypha.io" in tuned


def test_the_cpu_profile_runs_every_other_queue_on_prefork(hypha: Hypha) -> None:
    argv = worker_argv(hypha, profile_name="cpu")
    assert "--pool=prefork" in argv
    assert "--queues=gpu,hypha.coordinator,hypha.effects,hypha.nodes" in argv
    assert not any(a.startswith("--concurrency") for a in argv)


def test_the_default_profile_is_unchanged_and_a_bad_profile_refused(hypha: Hypha) -> None:
    assert worker_argv(hypha, profile_name="default") == worker_argv(hypha)
    with pytest.raises(SetupError, match="--profile"):
        worker_argv(hypha, profile_name="gevent")
