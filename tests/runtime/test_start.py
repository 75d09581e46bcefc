"""hypha.start(): notify, idempotency keys, unknown graphs."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from hypha_celery import (
    Context,
    Finish,
    Graph,
    Hypha,
    InvalidNotify,
    Next,
    RunCancelled,
    RunFailed,
    SpecError,
    UnknownGraph,
)
from tests.runtime.support import WAIT, assert_well_formed, wait_until


def _graph(gate: threading.Event | None = None) -> Graph:
    def work(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        if inp == "fail":
            raise ValueError("no")
        if inp == "hold" and gate is not None:
            gate.wait(WAIT)
        return {"echo": inp}

    def policy(ctx: Context) -> Next | Finish:
        return Next("work", ctx.input) if ctx.step == 0 else Finish(ctx.state["echo"])

    return Graph(id="echo", nodes={"work": work}, decision_policy=policy)


def test_notify_is_called_once_with_the_terminal_outcome(hypha: Hypha) -> None:
    calls: list[tuple[dict[str, Any], str]] = []
    lock = threading.Lock()

    @hypha.celery.task(name="tests.notify_sink", shared=False)
    def sink(outcome: dict[str, Any], tag: str) -> None:
        with lock:
            calls.append((outcome, tag))

    gate = threading.Event()
    hypha.register(_graph(gate))
    done = hypha.start("echo", "hi", notify=sink.s("done").set(queue="hypha.nodes"))
    failed = hypha.start("echo", "fail", notify=sink.s("failed").set(queue="hypha.nodes"))
    cancelled = hypha.start("echo", "hold", notify=sink.s("cancelled").set(queue="hypha.nodes"))
    assert done.wait(WAIT) == "hi"
    with pytest.raises(RunFailed):
        failed.wait(WAIT)
    cancelled.cancel()
    with pytest.raises(RunCancelled):
        cancelled.wait(WAIT)
    gate.set()
    wait_until(lambda: len(calls) >= 3, what="three notifications")
    time.sleep(0.3)  # a duplicate would arrive within this
    by_tag = {tag: outcome for outcome, tag in calls}
    assert len(calls) == 3 and set(by_tag) == {"done", "failed", "cancelled"}
    assert by_tag["done"] == {"run_id": done.id, "status": "completed", "result": "hi"}
    assert by_tag["failed"]["run_id"] == failed.id
    assert by_tag["failed"]["status"] == "failed"
    assert by_tag["failed"]["error"]["reason"] == "node_failed"
    assert by_tag["cancelled"]["run_id"] == cancelled.id
    assert by_tag["cancelled"]["status"] == "cancelled"
    assert by_tag["cancelled"]["error"]["reason"] == "cancelled"
    for run in (done, failed, cancelled):
        assert_well_formed(run)


@pytest.mark.parametrize("bad", [
    pytest.param({"task": "tests.notify_sink", "args": [], "kwargs": {}}, id="dict"),
    pytest.param("tests.notify_sink", id="task-name"),
    pytest.param(print, id="callable"),
    pytest.param("task-object", id="task-not-signature"),
    pytest.param("unserializable-args", id="signature-with-non-json-args"),
])
def test_non_signature_notify_is_rejected_before_anything(
    hypha: Hypha, published: list[str], bad: Any
) -> None:
    @hypha.celery.task(name="tests.notify_sink", shared=False)
    def sink(outcome: dict[str, Any], extra: Any = None) -> None:
        raise AssertionError("never called")

    if bad == "task-object":
        bad = sink
    elif bad == "unserializable-args":
        bad = sink.s(object())
    hypha.register(_graph())
    with pytest.raises(InvalidNotify):
        hypha.start("echo", "x", notify=bad)
    assert isinstance(InvalidNotify(), SpecError)
    assert hypha.store.run_ids() == []
    assert published == []


def test_idempotency_key_returns_the_same_run(hypha: Hypha) -> None:
    hypha.register(_graph())
    first = hypha.start("echo", "once", idempotency_key="req-1")
    again = hypha.start("echo", "other input", idempotency_key="req-1")
    assert again.id == first.id
    assert first.wait(WAIT) == "once"
    after = hypha.start("echo", "later", idempotency_key="req-1")
    assert after.id == first.id and after.wait(WAIT) == "once"
    different = hypha.start("echo", "two", idempotency_key="req-2")
    assert different.id != first.id and different.wait(WAIT) == "two"
    assert sorted(hypha.store.run_ids()) == sorted([first.id, different.id])
    assert [e.kind for e in first.events()].count("run.created") == 1
    assert_well_formed(first)


def test_idempotency_key_under_concurrent_starts(hypha: Hypha) -> None:
    hypha.register(_graph())
    barrier = threading.Barrier(4)
    ids: list[str] = []

    def start() -> None:
        barrier.wait()
        ids.append(hypha.start("echo", "race", idempotency_key="same").id)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert len(ids) == 4 and len(set(ids)) == 1
    assert hypha.store.run_ids() == [ids[0]]
    assert hypha.get_run(ids[0]).wait(WAIT) == "race"


def test_unknown_graph_at_start(hypha: Hypha, published: list[str]) -> None:
    hypha.register(_graph())
    with pytest.raises(UnknownGraph) as info:
        hypha.start("no-such-graph", {})
    assert isinstance(info.value, LookupError) and "echo" in str(info.value)
    assert hypha.store.run_ids() == [] and published == []


def test_invalid_start_arguments(hypha: Hypha, published: list[str]) -> None:
    hypha.register(_graph())
    with pytest.raises(SpecError):
        hypha.start("echo", {"x": {1, 2}})
    with pytest.raises(SpecError):
        hypha.start("echo", "x", on_busy="drop")  # type: ignore[arg-type]
    assert hypha.store.run_ids() == [] and published == []
