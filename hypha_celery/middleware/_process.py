"""The one fork hook of a process: what a forked child must forget.

A prefork worker imports hypha, builds its app (the store's engine, threads, clients)
and then forks its pool children. What a child inherits from its parent — a
connection pool, a thread that does not exist in the child, a pid-bound identity — must
be made fresh there. This module registers one ``os.register_at_fork(after_in_child=...)``
handler per process; after a fork it calls, in the child, first every callback given to
:func:`on_fork` (in registration order), then the ``after_fork`` hook of every middleware
of the process's stacks (each middleware once, even when several stacks hold it).

A callback is held weakly when it is a bound method (its object may go away: the
registry never keeps a store or a client alive). Callbacks run in the child right after
the fork, with only the forking thread alive: they reset state, never block, never do
I/O (anything that needs I/O is made on first use after it). One that raises is logged
by type and the others still run.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from hypha_celery.middleware._stack import _FORKED

__all__ = ["forked", "on_fork"]

log = logging.getLogger(__name__)

_callbacks: list[Callable[[], Callable[[], Any] | None]] = []
_lock = threading.Lock()


def on_fork(callback: Callable[[], Any]) -> None:
    """Call ``callback()`` in the child after every fork of this process (a bound method
    is held weakly: forgotten with its object)."""
    ref: Callable[[], Callable[[], Any] | None]
    if hasattr(callback, "__self__") and hasattr(callback, "__func__"):
        ref = weakref.WeakMethod(callback)
    else:
        ref = lambda: callback  # noqa: E731 - a plain function lives as long as its module
    with _lock:
        _callbacks.append(ref)


def forked() -> None:
    """What runs in a child after a fork (also what a test calls to act one out)."""
    with _lock:
        alive = [(ref, fn) for ref in _callbacks if (fn := ref()) is not None]
        _callbacks[:] = [ref for ref, _ in alive]
    for _, fn in alive:
        _safely(fn, getattr(fn, "__qualname__", repr(fn)))
    told: set[int] = set()
    for stack in list(_FORKED):
        for bound in stack._by_hook["after_fork"]:
            owner = bound.__self__
            if id(owner) not in told:
                told.add(id(owner))
                _safely(bound, f"{type(owner).__name__}.after_fork")


def _safely(fn: Callable[[], Any], name: str) -> None:
    try:
        fn()
    except Exception as exc:  # a child still starts
        log.warning("after fork: %s raised %s", name, type(exc).__name__)


def _in_child() -> None:
    global _lock
    _lock = threading.Lock()  # the fork may have happened while another thread held it
    forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
