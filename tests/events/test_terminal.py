"""Exactly one terminal event per run, whatever ends it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph, Hypha, Next, RunCancelled, RunFailed
from hypha_celery.events import TERMINAL_KINDS
from tests.runtime.support import WAIT, assert_well_formed, running, terminal_events, wait_until


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    with running(sqlite_url) as app:
        yield app


def test_one_terminal_event_per_run(hypha: Hypha) -> None:
    entered, gate = threading.Event(), threading.Event()

    def work(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        if inp == "fail":
            raise ValueError("no")
        if inp == "hold":
            entered.set()
            gate.wait(WAIT)
        return {"v": inp}

    def policy(ctx: Context) -> Next | Finish:
        if ctx.input == "loop":
            return Next("work", "x")
        return Next("work", ctx.input) if ctx.step == 0 else Finish(ctx.state)

    hypha.register(Graph(id="t", nodes={"work": work}, decision_policy=policy, max_steps=3))
    runs = {inp: hypha.start("t", inp) for inp in ("ok", "fail", "loop", "hold")}
    assert entered.wait(WAIT)
    assert runs["hold"].cancel() is True
    # cancelling an ended run is refused and writes nothing
    assert runs["ok"].wait(WAIT) == {"v": "ok"}
    assert runs["ok"].cancel() is False
    for inp in ("fail", "loop"):
        with pytest.raises(RunFailed):
            runs[inp].wait(WAIT)
    with pytest.raises(RunCancelled):
        runs["hold"].wait(WAIT)
    assert runs["hold"].cancel() is False
    gate.set()
    wait_until(lambda: runs["hold"].events()[-1].kind == "node.execution.late_result",
               what="late result")
    expected = {"ok": "run.completed", "fail": "run.failed", "loop": "run.failed",
                "hold": "run.cancelled"}
    for inp, run in runs.items():
        assert [e.kind for e in terminal_events(run)] == [expected[inp]]
        assert_well_formed(run)
        assert sum(e.kind in TERMINAL_KINDS for e in run.events()) == 1
        assert sum(e.kind == "run.cancel.requested" for e in run.events()) == (
            inp == "hold")
