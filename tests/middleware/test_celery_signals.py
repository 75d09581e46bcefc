"""Celery's signals reach the stacks bound to the app they are about, as typed hooks."""

from __future__ import annotations

import os
from typing import Any

import pytest
from celery import Celery
from celery.signals import worker_process_shutdown, worker_ready, worker_shutdown

from hypha_celery.middleware import Middleware, MiddlewareStack, Process, Publish
from hypha_celery.middleware import _celery_signals as celery_signals


class Sender:
    """What Celery's worker signals are sent by (a consumer, a worker): it has the app."""

    def __init__(self, app: Celery) -> None:
        self.app = app


class Recorder(Middleware):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def process_boot(self, process: Process) -> None:
        self.seen.append(("boot", process))

    def process_shutdown(self, process: Process) -> None:
        self.seen.append(("shutdown", process))

    def before_publish(self, message: Publish) -> None:
        message.headers["x_hypha_test"] = "added"
        self.seen.append(("before_publish", message.task))

    def after_publish(self, message: Publish) -> None:
        self.seen.append(("after_publish", (message.task, message.task_id,
                                            message.headers.get("x_hypha_test"))))


@pytest.fixture
def apps() -> tuple[Celery, Celery]:
    return (Celery("one", broker="memory://", set_as_current=False),
            Celery("two", broker="memory://", set_as_current=False))


def test_worker_signals_reach_the_apps_stacks_only(apps: tuple[Celery, Celery]) -> None:
    one, two = apps
    mine, other = Recorder(), Recorder()
    celery_signals.bind(one, MiddlewareStack([mine]))
    celery_signals.bind(two, MiddlewareStack([other]))
    one.amqp.queues.select(["hypha.nodes"])
    worker_ready.send(sender=Sender(one))
    worker_shutdown.send(sender=Sender(one))
    assert mine.seen == [("boot", Process(os.getpid(), queues=frozenset({"hypha.nodes"}))),
                         ("shutdown", Process(os.getpid()))]
    assert other.seen == []


def test_a_pool_childs_exit_reaches_the_stacks_of_its_current_app(
        apps: tuple[Celery, Celery]) -> None:
    one, _ = apps
    mine = Recorder()
    celery_signals.bind(one, MiddlewareStack([mine]))
    one.set_current()
    worker_process_shutdown.send(sender="host", pid=4242, exitcode=0)
    assert mine.seen == [("shutdown", Process(4242, child=True))]


def test_a_publish_may_add_headers_and_is_told_to_the_publishing_apps_stacks(
        apps: tuple[Celery, Celery]) -> None:
    one, two = apps
    mine, other = Recorder(), Recorder()
    celery_signals.bind(one, MiddlewareStack([mine]))
    celery_signals.bind(two, MiddlewareStack([other]))
    with celery_signals.publishing(one):
        one.send_task("hypha.test", task_id="t1", queue="q")
    assert mine.seen == [("before_publish", "hypha.test"),
                         ("after_publish", ("hypha.test", "t1", "added"))]
    assert other.seen == []


def test_the_queues_a_worker_consumes_are_remembered_per_app(
        apps: tuple[Celery, Celery]) -> None:
    one, two = apps
    celery_signals.set_consumed_queues(one, frozenset({"a"}))
    assert celery_signals.consumed_queues(one) == frozenset({"a"})
    assert celery_signals.consumed_queues(two) == frozenset()
