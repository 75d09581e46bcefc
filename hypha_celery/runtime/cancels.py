"""A run's cancel reaching node code that is blocked (a model call waiting on the
network): one watch thread per process.

``ctx.cancelled()`` is cooperative: node code must ask. A call blocked in a read cannot
ask, so it registers what stops it: ``with on_cancel(ctx, stream.close): ...``. While the
block runs, the process's :class:`RunWatch` reads, every ``POLL_S``, the projections of
all runs with a registered call in one query (``load_many``) and calls the ``cancel`` of
each call whose run no longer awaits its execution (cancelled, ended or timed out), once,
on a thread of its own. The thread starts with the first registration in a process
(again after a fork) and exits when nothing has been registered for a while
(:class:`~hypha_celery.runtime.watcher.Watcher`).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from hypha_celery.events import View
from hypha_celery.runtime.core import awaits
from hypha_celery.runtime.watcher import Watcher, fire
from hypha_celery.store import EventStore

log = logging.getLogger(__name__)

#: Seconds between two reads of the watched runs.
POLL_S = 0.2
#: How long a ``ctx.cancelled()`` answer is reused before the store is asked again (s).
CHECK_INTERVAL = 0.2


def stopped_awaiting(view: View | None, awaited: str) -> bool:
    """The run no longer awaits ``awaited``: cancelled (or asked to be), ended, timed out."""
    return not awaits(view, awaited) or (view is not None and bool(view["cancel_requested"]))


class CancelFlag:
    """``ctx.cancelled()`` of one execution (the store is read at most every
    ``CHECK_INTERVAL``), and :meth:`watching`, which registers a ``cancel`` for it."""

    def __init__(self, store: EventStore, run_id: str, awaited: str) -> None:
        self.store, self.run_id, self.awaited = store, run_id, awaited
        self._at, self._value = 0.0, False

    def __call__(self) -> bool:
        now = time.monotonic()
        if not self._value and now - self._at >= CHECK_INTERVAL:
            self._value = stopped_awaiting(self.store.load(self.run_id), self.awaited)
            self._at = now
        return self._value

    def watching(self, cancel: Callable[[], None]) -> AbstractContextManager[None]:
        return watch_for(self.store).call(self.run_id, self.awaited, cancel)


def on_cancel(ctx: Any, cancel: Callable[[], None]) -> AbstractContextManager[None]:
    """``with on_cancel(ctx, stream.close):`` call ``cancel`` (once, from another
    thread) if the run stops awaiting this node while the block runs. A context built by
    hand (tests) watches nothing."""
    flag = getattr(ctx, "_cancelled", None)
    return flag.watching(cancel) if isinstance(flag, CancelFlag) else nullcontext()


@dataclass
class _Call:
    run_id: str
    awaited: str
    cancel: Callable[[], None]
    fired: bool = False


class RunWatch(Watcher):
    """The watcher of one store in this process."""

    name = "hypha-run-watch"
    interval = POLL_S
    tables = ("calls",)

    def __init__(self, store: EventStore) -> None:
        super().__init__()
        self._store = weakref.ref(store)  # the registry below must not keep it alive

    def call(self, run_id: str, awaited: str,
             cancel: Callable[[], None]) -> AbstractContextManager[None]:
        return self.registered("calls", _Call(run_id, awaited, cancel))

    def tick(self, now: float, tables: dict[str, list[Any]]) -> None:
        calls = [c for c in tables["calls"] if not c.fired]
        store = self._store()
        if not calls or store is None:
            return
        views = store.load_many(sorted({c.run_id for c in calls}))
        for c in calls:
            if stopped_awaiting(views.get(c.run_id), c.awaited):
                c.fired = True
                fire(c.cancel, "hypha-run-cancel")


_watches: weakref.WeakKeyDictionary[EventStore, RunWatch] = weakref.WeakKeyDictionary()
_watches_lock = threading.Lock()


def watch_for(store: EventStore) -> RunWatch:
    """The process's watch of ``store`` (one per store object)."""
    with _watches_lock:
        found = _watches.get(store)
        if found is None:
            found = _watches[store] = RunWatch(store)
        return found


__all__ = ["CHECK_INTERVAL", "POLL_S", "CancelFlag", "RunWatch", "on_cancel",
           "stopped_awaiting", "watch_for"]
