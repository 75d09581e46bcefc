"""Helpers for tests that drive the real embedded runtime (memory transport,
in-process threads worker, a real SQL store)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypha_celery import Event, Finish, Graph, Hypha, Next, RunHandle, Settings
from hypha_celery.events import TERMINAL_KINDS
from hypha_celery.testing.waiting import wait_until as wait_until  # re-exported

#: Upper bound for anything the tests wait on; runs here take well under a second.
WAIT = 15.0


def embedded(store_url: str) -> Hypha:
    return Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                          store_url=store_url, embedded=True))


@contextmanager
def running(store_url: str) -> Iterator[Hypha]:
    hypha = embedded(store_url)
    try:
        yield hypha
    finally:
        hypha.close()


def kinds(run: RunHandle) -> list[str]:
    return [e.kind for e in run.events()]


def of_kind(run: RunHandle, kind: str) -> list[Event]:
    return [e for e in run.events() if e.kind == kind]


def terminal_events(run: RunHandle) -> list[Event]:
    return [e for e in run.events() if e.kind in TERMINAL_KINDS]


def assert_well_formed(run: RunHandle) -> None:
    """Gap-free seq from 1, exactly one terminal event, nothing but late
    results after it."""
    evs = run.events()
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    terminal = [i for i, e in enumerate(evs) if e.kind in TERMINAL_KINDS]
    assert len(terminal) == 1, [e.kind for e in evs]
    assert all(e.kind == "node.execution.late_result" for e in evs[terminal[0] + 1:])


def echo_graph() -> Graph:
    """Graph ``echo``: one node that keeps its input, which the run returns."""
    def work(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        return {"echo": inp}

    def policy(ctx: Any) -> Any:
        return Next("work", ctx.input) if ctx.step == 0 else Finish(ctx.state["echo"])

    return Graph(id="echo", nodes={"work": work}, decision_policy=policy)
