"""Celery's signals, connected once per process, told to the middleware as hooks.

Every hypha module that needs a Celery signal goes through here: nothing else connects
one. :func:`bind` ties a :class:`~hypha_celery.middleware.MiddlewareStack` to a Celery
app (``Hypha`` binds its stack; ``metrics.export`` the exporter's); the signals reach
the stacks of the app they are about:

========================================  ===============================================
Celery signal                              hook
========================================  ===============================================
``worker_ready`` (main process)            ``process_boot(Process(pid, queues=...))``
``worker_process_init`` (prefork child)    ``process_boot(Process(pid, child=True))``
``worker_process_shutdown`` (child)        ``process_shutdown(Process(pid, child=True))``
``worker_shutdown`` (main process)         ``process_shutdown(Process(pid, queues=...))``
``before_task_publish``                    ``before_publish(Publish)`` (may add headers)
``after_task_publish``                     ``after_publish(Publish)``
``celeryd_after_setup``                    the queues the worker consumes
                                           (:func:`consumed_queues`; before the pool
                                           forks, so children know them); and, before
                                           it connects, a bound app's Redis broker
                                           pools sized to a gevent or thread pool
                                           (:func:`~._broker_pool.fit`)
========================================  ===============================================

A pool child's signals carry no app: they reach the stacks of the child's current app
(Celery makes the worker's app current in each child). A publish reaches the stacks of
the app whose task the publishing thread runs (a chain's or a chord's next message
included), else of the app the runtime publishes for (:func:`publishing`), else of
Celery's current app. The publish signals are connected only once a bound stack has a
publish hook: an app without one pays nothing per message. Forks are told by
:mod:`~hypha_celery.middleware._process` (``os.register_at_fork``), not by a signal.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from celery import current_task
from celery.app import app_or_default
from celery.signals import (
    after_task_publish,
    before_task_publish,
    celeryd_after_setup,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from hypha_celery.middleware import _broker_pool
from hypha_celery.middleware._hooks import Process, Publish
from hypha_celery.middleware._stack import MiddlewareStack

__all__ = ["bind", "consumed_queues", "publishing", "set_consumed_queues", "stacks_of"]

_stacks: weakref.WeakKeyDictionary[Any, list[MiddlewareStack]] = weakref.WeakKeyDictionary()
_queues: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_publishing = threading.local()
_connected: set[str] = set()


def bind(app: Any, stack: MiddlewareStack) -> None:
    """Tell ``stack`` the Celery signals about ``app`` (a Celery app)."""
    with _lock:
        _stacks.setdefault(app, []).append(stack)
        _connect("process", _connect_process)
        if stack.wants("before_publish") or stack.wants("after_publish"):
            _connect("publish", _connect_publish)


def stacks_of(app: Any) -> list[MiddlewareStack]:
    """The stacks bound to ``app``."""
    return [] if app is None else list(_stacks.get(app, ()))


def consumed_queues(app: Any) -> frozenset[str]:
    """The queues this process's worker of ``app`` consumes (empty: not a worker)."""
    return _queues.get(app, frozenset())


def set_consumed_queues(app: Any, queues: frozenset[str]) -> None:
    """Record the queues this process's worker of ``app`` consumes (Celery's
    ``celeryd_after_setup`` does; an embedded worker, which has no such signal, too)."""
    _queues[app] = queues


class publishing:  # a context manager used as a function: ``with publishing(app):``
    """Messages published in the block are ``app``'s (the runtime publishing outside a
    task: a client's kickoff, a sweep run from the command line). A class, not a
    generator: it is entered on every publish of the runtime."""

    __slots__ = ("app", "previous")

    def __init__(self, app: Any) -> None:
        self.app, self.previous = app, None

    def __enter__(self) -> None:
        self.previous = getattr(_publishing, "app", None)
        _publishing.app = self.app

    def __exit__(self, *_: object) -> None:
        _publishing.app = self.previous


def _connect(name: str, connect: Any) -> None:
    if name not in _connected:
        connect()
        _connected.add(name)


def _connect_process() -> None:
    worker_ready.connect(_worker_ready, weak=False)
    worker_shutdown.connect(_worker_shutdown, weak=False)
    worker_process_init.connect(_child_init, weak=False)
    worker_process_shutdown.connect(_child_shutdown, weak=False)


def _connect_publish() -> None:
    before_task_publish.connect(_before_publish, weak=False)
    after_task_publish.connect(_after_publish, weak=False)


def _remember_queues(sender: Any, instance: Any, **_: Any) -> None:
    app = instance.app
    set_consumed_queues(app, _worker_queues(app))


def _fit_broker_pool(sender: Any, instance: Any, **_: Any) -> None:
    app = instance.app
    if stacks_of(app):  # a Hypha app's worker (another app's settings stay its own)
        _broker_pool.fit(app, instance.pool_cls, instance.concurrency)


celeryd_after_setup.connect(_remember_queues, weak=False)  # any worker, bound or not
celeryd_after_setup.connect(_fit_broker_pool, weak=False)


def _worker_queues(app: Any) -> frozenset[str]:
    queues = app.amqp.queues
    return frozenset(queues.consume_from or queues)


def _worker_ready(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    if app is None:
        return
    process = Process(os.getpid(), queues=_worker_queues(app))
    for stack in stacks_of(app):
        stack.process_boot(process)


def _worker_shutdown(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    process = Process(os.getpid(), queues=consumed_queues(app))
    for stack in stacks_of(app):
        stack.process_shutdown(process)


def _child_init(**_: Any) -> None:
    process = Process(os.getpid(), child=True)
    for stack in stacks_of(app_or_default()):
        stack.process_boot(process)


def _child_shutdown(pid: int | None = None, **_: Any) -> None:
    process = Process(pid or os.getpid(), child=True)
    for stack in stacks_of(app_or_default()):
        stack.process_shutdown(process)


def _publisher() -> Any:
    """The app a message being published is for (see the module's docstring)."""
    task_app = getattr(current_task, "app", None)
    if task_app is not None:
        return task_app
    app = getattr(_publishing, "app", None)
    return app if app is not None else app_or_default()


def _before_publish(sender: Any = None, headers: dict[str, Any] | None = None,
                    routing_key: str | None = None, **_: Any) -> None:
    stacks = stacks_of(_publisher())
    if not stacks or headers is None:
        return
    message = Publish(str(sender), headers.get("id"), routing_key, headers)
    for stack in stacks:
        stack.before_publish(message)


def _after_publish(sender: Any = None, headers: dict[str, Any] | None = None,
                   routing_key: str | None = None, **_: Any) -> None:
    stacks = stacks_of(_publisher())
    if not stacks:
        return
    headers = headers if headers is not None else {}
    message = Publish(str(sender), headers.get("id"), routing_key, headers)
    for stack in stacks:
        stack.after_publish(message)
