"""Runs sharing (user_id, session_id) go one at a time, FIFO."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph, Hypha, LaneBusy, Next, Settings
from hypha_celery.errors import Overloaded
from tests.runtime.support import WAIT, assert_well_formed, of_kind


def _graph(spans: list[tuple[str, float, float]], gate: threading.Event | None = None,
           entered: threading.Event | None = None) -> Graph:
    def work(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        began = time.monotonic()
        if gate is not None and inp == "gated":
            if entered is not None:
                entered.set()
            gate.wait(WAIT)
        time.sleep(0.05)
        spans.append((inp, began, time.monotonic()))
        return {"done": inp}

    def policy(ctx: Context) -> Next | Finish:
        return Next("work", ctx.input) if ctx.step == 0 else Finish(ctx.state["done"])

    return Graph(id="lane", nodes={"work": work}, decision_policy=policy)


def test_same_lane_runs_one_at_a_time_fifo(hypha: Hypha) -> None:
    spans: list[tuple[str, float, float]] = []
    gate = threading.Event()
    hypha.register(_graph(spans, gate))
    runs = [hypha.start("lane", tag, user_id="u", session_id="s")
            for tag in ("gated", "second", "third")]
    other = hypha.start("lane", "other", user_id="u", session_id="other-session")
    assert other.wait(WAIT) == "other"  # another lane is not blocked by this one
    assert [r.status().status for r in runs] == ["running", "queued", "queued"]
    gate.set()
    assert [r.wait(WAIT) for r in runs] == ["gated", "second", "third"]

    mine = [s for s in spans if s[0] != "other"]
    assert [s[0] for s in mine] == ["gated", "second", "third"]
    for (_, _, end), (_, begin, _) in zip(mine, mine[1:], strict=False):
        assert end <= begin  # no overlap
    started = [of_kind(r, "run.started")[0] for r in runs]
    ended = [of_kind(r, "run.completed")[0] for r in runs]
    assert started[0].ts < started[1].ts < started[2].ts
    assert ended[0].ts <= started[1].ts and ended[1].ts <= started[2].ts
    assert not of_kind(runs[0], "run.queued")
    assert [of_kind(r, "run.queued")[0].data["behind"] for r in runs[1:]] == [runs[0].id] * 2
    for r in [*runs, other]:
        assert_well_formed(r)
    # the lane is free again: a new run starts at once
    nxt = hypha.start("lane", "fourth", user_id="u", session_id="s")
    assert not of_kind(nxt, "run.queued")
    assert nxt.wait(WAIT) == "fourth"


def test_on_busy_reject_raises_and_writes_nothing(hypha: Hypha, published: list[str]) -> None:
    calls: list[Any] = []

    @hypha.celery.task(name="tests.lane_notify", shared=False)
    def sink(outcome: dict[str, Any]) -> None:
        calls.append(outcome)

    gate, entered = threading.Event(), threading.Event()
    hypha.register(_graph([], gate, entered))
    active = hypha.start("lane", "gated", user_id="u", session_id="s")
    assert entered.wait(WAIT)  # nothing else is published until the gate opens
    before = (hypha.store.run_ids(), active.events())
    published.clear()
    with pytest.raises(LaneBusy) as info:
        hypha.start("lane", "rejected", user_id="u", session_id="s", on_busy="reject",
                    notify=sink.s().set(queue="hypha.nodes"))
    assert info.value.active_run_id == active.id
    assert published == []
    assert (hypha.store.run_ids(), active.events()) == before
    gate.set()
    assert active.wait(WAIT) == "gated"
    assert calls == []  # the rejected request is never notified
    # once the lane is idle, reject lets a run through
    assert hypha.start("lane", "now", user_id="u", session_id="s",
                       on_busy="reject").wait(WAIT) == "now"


def test_a_full_lane_raises_overloaded_and_writes_nothing(sqlite_url: str) -> None:
    """The runs' lane uses the same bounded FIFO as agents: count and input bytes."""
    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=sqlite_url, embedded=True, lane_max_pending=2,
                       lane_max_pending_bytes=1_000))
    try:
        gate, entered = threading.Event(), threading.Event()
        h.register(_graph([], gate, entered))
        active = h.start("lane", "gated", user_id="u", session_id="s")
        assert entered.wait(WAIT)
        queued = [h.start("lane", tag, user_id="u", session_id="s") for tag in ("a", "b")]
        before = h.store.run_ids()
        with pytest.raises(Overloaded) as full:
            h.start("lane", "c", user_id="u", session_id="s")
        assert full.value.info == {"queue": "runs", "limit": "count", "pending_count": 2,
                                   "pending_bytes": 6, "incoming_bytes": 3, "max_count": 2,
                                   "max_bytes": 1_000}
        assert h.store.run_ids() == before
        # cancelling a queued run frees its place at once
        assert h.cancel(queued[0].id)
        with pytest.raises(Overloaded) as big:
            h.start("lane", "x" * 1_000, user_id="u", session_id="s")
        assert big.value.info["limit"] == "bytes"
        third = h.start("lane", "c", user_id="u", session_id="s")
        gate.set()
        assert [r.wait(WAIT) for r in (active, queued[1], third)] == ["gated", "b", "c"]
        assert queued[0].status().status == "cancelled"
    finally:
        h.close()


def test_an_input_past_its_bound_is_refused_at_start_and_writes_nothing(
        sqlite_url: str) -> None:
    """A free session does not make a large input acceptable: the bound is checked
    before anything is recorded, queued or not."""
    from hypha_celery import InputTooLarge

    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=sqlite_url, embedded=True, max_input_bytes=100))
    try:
        h.register(_graph([]))
        with pytest.raises(InputTooLarge) as big:
            h.start("lane", "x" * 99, user_id="u", session_id="free")
        assert (big.value.size, big.value.limit) == (101, 100)  # JSON: the quotes count
        assert "nothing was recorded" in str(big.value)
        assert h.store.run_ids() == []
        assert h.start("lane", "x" * 98).wait(WAIT) == "x" * 98  # 100 bytes: at the bound
    finally:
        h.close()


def test_the_input_bound_comes_from_the_environment() -> None:
    assert Settings.from_env({"HYPHA_MAX_INPUT_BYTES": "4096"}).max_input_bytes == 4096
    assert Settings.from_env({}).max_input_bytes == 8 * 1024 * 1024
