"""A handle on one run: status, events, live tokens, cancel, wait."""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol

from hypha_celery.errors import (
    FailureReason,
    RunCancelled,
    RunFailed,
    RunNotFound,
    RunTimeout,
    WaitTimeout,
)
from hypha_celery.events import TERMINAL_STATUSES, Event, RunStatus, View
from hypha_celery.events.view import CaseDoc, Parked, Quarantine, TerminalError
from hypha_celery.live import (
    LiveBus,
    LiveItem,
    LiveStream,
    Subscription,
    end_item,
    run_topic,
)
from hypha_celery.projections import AuditView, RunView, audit_view, run_view
from hypha_celery.runtime.notifier import POLL_INTERVAL, Notifier
from hypha_celery.store import EventStore


class RunHost(Protocol):
    """What a :class:`RunHandle` reads through: a ``Hypha``, or a client bound to a
    principal (whose store finds only that principal's runs)."""

    @property
    def store(self) -> EventStore: ...
    @property
    def live(self) -> LiveBus: ...
    @property
    def notifier(self) -> Notifier: ...
    def cancel(self, run_id: str) -> bool: ...


@dataclass(frozen=True)
class RunSnapshot:
    """A snapshot of the run projection, without state or input (which may hold
    prompt text): safe to log and print (:meth:`RunHandle.status`)."""

    run_id: str
    graph_id: str
    status: RunStatus
    step: int
    waiting_nodes: list[str]
    error: TerminalError | None
    created_at: float
    updated_at: float
    seq: int
    #: Why a ``parked`` / ``quarantined`` run waits for a human (ids and reasons only).
    held: Quarantine | Parked | None = None
    #: The awaited execution's attempt (retries) and recovery re-drives so far.
    attempt: int = 1
    recoveries: int = 0
    #: A workflow's state, and its last recovery case (ids, statuses, hashes, reasons).
    workflow_state: str | None = None
    case: CaseDoc | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES


class RunHandle:
    """Returned by :meth:`Hypha.start`; also :meth:`Hypha.get_run` for any id."""

    def __init__(self, hypha: RunHost, run_id: str) -> None:
        self._hypha = hypha
        self.id = run_id

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r})"

    def status(self) -> RunSnapshot:
        v = self._hypha.store.get(self.id)
        return RunSnapshot(run_id=v["run_id"], graph_id=v["graph_id"] or "", status=v["status"],
                         step=v["step"], waiting_nodes=list(v["waiting_nodes"]),
                         error=v["error"], created_at=v["created_at"] or 0.0,
                         updated_at=v["updated_at"] or 0.0, seq=v["seq"],
                         held=v["quarantine"] or v["parked"],
                         attempt=int(v["attempt"] or 1),
                         recoveries=int(v["recoveries"] or 0),
                         workflow_state=v["fsm"]["state"] if v["fsm"] else None,
                         case=v["fsm"].get("case") if v["fsm"] else None)

    def events(self, after_seq: int = 0) -> list[Event]:
        return self._hypha.store.events(self.id, after_seq=after_seq)

    def view(self) -> RunView:
        """hypha's view of the run (status, output, error, timing) from its events."""
        events = self.events()
        if not events:
            raise RunNotFound(f"no run {self.id!r} in the event store")
        return run_view(events)

    def audit(self) -> AuditView:
        """The run's audit (state path, decisions, tool and model calls, policy
        decisions, failure handling, outcome) from its events; no input or state."""
        events = self.events()
        if not events:
            raise RunNotFound(f"no run {self.id!r} in the event store")
        return audit_view(events)

    def stream(self, timeout: float | None = None) -> LiveStream:
        """The run's live items from now on: what its nodes' model calls emit (``text``
        deltas, ``tool_use`` notices, ``usage``; see :mod:`hypha_celery.live`), never
        stored, so nothing emitted before this call comes back (the events do:
        :meth:`events`). Subscribed when this returns. Ends with the run's ``end`` item
        ``{"kind": "end", "status", "reason"}`` — made up from the store when the run has
        ended already or its end item was lost — or, without one, when ``timeout``
        seconds have passed. A ``{"kind": "gap", "lost": n}`` item marks items this
        watcher lost (it read slower than they came). It is a context manager:
        ``with run.stream(timeout=30) as stream: for item in stream: ...`` drops the
        subscription when the block ends, early or not (or call ``close()``).
        Raises :class:`RunNotFound` for an unknown run."""
        sub = self._hypha.live.subscribe(run_topic(self.id))
        try:
            view = self._hypha.store.get(self.id)
        except BaseException:
            sub.close()
            raise
        return LiveStream(sub, _live(sub, self._hypha.store, view, timeout))

    def cancel(self) -> bool:
        """Cancel the run; False when it had already ended."""
        return self._hypha.cancel(self.id)

    def wait(self, timeout: float | None = None) -> Any:
        """The ``Finish`` result, or raise RunFailed / RunTimeout / RunCancelled.
        ``WaitTimeout`` when ``timeout`` passes first (the run goes on)."""
        end = None if timeout is None else time.monotonic() + timeout
        store = self._hypha.store
        with self._hypha.notifier.listen(self.id) as listener:
            while True:
                view = store.get(self.id)
                if view["status"] in TERMINAL_STATUSES:
                    return _result(view)
                left = POLL_INTERVAL if end is None else end - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(f"run {self.id} still {view['status']} after {timeout}s")
                listener.wait(min(left, POLL_INTERVAL))


def _live(sub: Subscription, store: EventStore, view: View, timeout: float | None
          ) -> Generator[LiveItem, None, None]:
    """``sub``'s items until the run's end; the store is read when it is quiet, and at
    least every ``POLL_INTERVAL``, in case the end item was lost."""
    end = None if timeout is None else time.monotonic() + timeout
    checked = time.monotonic()
    with sub:
        while view["status"] not in TERMINAL_STATUSES:
            now = time.monotonic()
            if end is not None and now >= end:
                return
            item = sub.get(min(POLL_INTERVAL, end - now) if end is not None else POLL_INTERVAL)
            if item is not None:
                yield item
                if item["kind"] == "end":
                    return
            elif sub.closed:  # the bus was closed
                return
            if item is None or time.monotonic() - checked >= POLL_INTERVAL:
                view, checked = store.get(view["run_id"]), time.monotonic()
        while (item := sub.get(0)) is not None:  # what arrived before the end was seen
            yield item
            if item["kind"] == "end":
                return
        yield _end_of(view)


def _end_of(view: View) -> LiveItem:
    err = view["error"]
    return end_item(status=str(view["status"]), reason=err["reason"] if err else None)


def _result(view: View) -> Any:
    if view["status"] == RunStatus.COMPLETED:
        return view["result"]
    err = view["error"]
    reason, message = (err["reason"], err["message"]) if err else (str(view["status"]), "")
    if view["status"] == RunStatus.CANCELLED:
        raise RunCancelled(view["run_id"], reason, message)
    if reason == FailureReason.DEADLINE_EXCEEDED:
        raise RunTimeout(view["run_id"], reason, message)
    raise RunFailed(view["run_id"], reason, message)
