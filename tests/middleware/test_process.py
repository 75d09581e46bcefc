"""The one fork hook: callbacks and middleware told in a forked child, once each."""

from __future__ import annotations

import gc
import logging
import os

import pytest

from hypha_celery.middleware import Middleware, MiddlewareStack, on_fork
from hypha_celery.middleware._process import forked


class Forgets(Middleware):
    def __init__(self) -> None:
        self.forks = 0

    def after_fork(self) -> None:
        self.forks += 1


class Holder:
    def __init__(self) -> None:
        self.forks = 0

    def forget(self) -> None:
        self.forks += 1


def test_a_fork_tells_callbacks_and_each_middleware_once() -> None:
    holder, mw = Holder(), Forgets()
    on_fork(holder.forget)
    first = MiddlewareStack([mw])
    second = first.added(Forgets())  # mw is in both stacks
    forked()
    assert holder.forks == 1 and mw.forks == 1 and second.middleware[1].forks == 1  # type: ignore[attr-defined]


def test_a_bound_method_is_held_weakly() -> None:
    holder = Holder()
    on_fork(holder.forget)
    del holder
    gc.collect()
    forked()  # nothing to call, nothing raised


def test_a_raising_callback_is_logged_and_the_others_run(
        caplog: pytest.LogCaptureFixture) -> None:
    holder = Holder()

    def broken() -> None:
        raise RuntimeError("secret")

    on_fork(broken)
    on_fork(holder.forget)
    with caplog.at_level(logging.WARNING, "hypha_celery.middleware._process"):
        forked()
    assert holder.forks == 1
    assert "broken raised RuntimeError" in caplog.text and "secret" not in caplog.text


def test_a_real_fork_runs_the_hook_in_the_child_only() -> None:
    mw = Forgets()
    stack = MiddlewareStack([mw])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it was told, and leave at once
        os.write(write, str(mw.forks).encode())
        os._exit(0)
    os.close(write)
    told = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert told == b"1" and mw.forks == 0 and len(stack) == 1
