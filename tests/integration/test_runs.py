"""Runs on a real prefork worker process (``-P prefork -c 2``), Redis and RabbitMQ
brokers, PostgreSQL store: canvas shape, fan-out order, failing edges, notify,
lanes, node timeouts and cancellation."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from hypha_celery import LaneBusy, RunCancelled, RunFailed, RunHandle
from tests.integration import app as itest
from tests.integration.helpers import (
    Stack,
    assert_exactly_once,
    assert_well_formed,
    of_kind,
    wait_until,
)

pytestmark = pytest.mark.services


def notify_key() -> str:
    return f"itest:notify:{uuid.uuid4().hex}"


def notified(s: Stack, key: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in s.redis.lrange(key, 0, -1)]


def notified_once(s: Stack, key: str) -> dict[str, Any]:
    """Wait for the first notification, then give a duplicate time to show up."""
    wait_until(lambda: notified(s, key), what="the notify signature", log=s.worker.tail)
    time.sleep(0.5)
    calls = notified(s, key)
    assert len(calls) == 1, calls
    return calls[0]


def start(s: Stack, graph: str, payload: Any, **kwargs: Any) -> RunHandle:
    return s.client.start(graph, payload, **kwargs)


# -- canvas, names, fan-out ---------------------------------------------------
def test_worker_registers_graph_dot_node_task_names(any_stack: Stack) -> None:
    """What Flower lists: one task per node and reducer, named ``graph.node``."""
    s = any_stack
    replies = s.client.celery.control.inspect([s.worker.name], timeout=5).registered()
    names = set(replies[s.worker.name])
    assert {"hypha.coordinator", "itest.classify", "itest.lookup", "itest.boom",
            "itest.answer", "itest.merge", "itest_dup.total", "itest_slow.slow"} <= names


def test_fanout_edges_reach_the_reducer_in_declaration_order(any_stack: Stack) -> None:
    s = any_stack
    run = start(s, "itest", {"question": "why a double charge?",
                             # a outlasts b by far: b waits for a free pool child
                             # while the kickoff coordinator still holds one
                             "edges": [["a", 1.5, False], ["b", 0.01, False],
                                       ["c", 0.1, False]]})
    result = s.wait(run)
    assert result["order"] == ["a", "b", "c"]
    assert result["answer"] == "billing: 3 sources"  # ran on its own queue, itest.answers
    done_a, done_b, _ = result["done_at"]
    assert done_b < done_a  # completion order differed from declaration order
    events = run.events()
    assert assert_well_formed(events).kind == "run.completed"
    assert_exactly_once(events)
    (fanout,) = of_kind(events, "node.fanout.scheduled")
    assert [e["node_id"] for e in fanout.data["edges"]] == ["lookup"] * 3
    assert [e.data["node_id"] for e in of_kind(events, "node.execution.scheduled")] == ["classify",
                                                                             "answer"]
    assert s.worker.proc is not None
    pids = {int(e.data["worker"].rsplit(":", 1)[1]) for e in of_kind(events,
                                                                     "node.execution.started")}
    assert s.worker.proc.pid not in pids  # the prefork children ran the nodes


@pytest.mark.parametrize("mode", ["collect", "fail_fast"])
def test_a_failing_edge_still_lets_the_reducer_decide(any_stack: Stack, mode: str) -> None:
    s = any_stack
    run = start(s, "itest", {"question": "q", "mode": mode,
                             "edges": [["a", 0.05, False], ["x", 0.0, True],
                                       ["c", 0.01, False]]})
    result = s.wait(run)
    assert result["order"] == ["a", None, "c"]
    assert result["errors"] == [None, "ValueError", None]
    if mode == "collect":
        assert result["answer"] == "other: 2 sources"
        assert result["edge_nodes"] == ["lookup", "boom", "lookup"]
    else:
        assert result["aborted"] is True
    events = run.events()
    assert assert_well_formed(events).kind == "run.completed"
    assert_exactly_once(events)
    (failed,) = of_kind(events, "node.execution.failed")
    assert failed.data["node_id"] == "boom"
    assert failed.data["error"] == {"type": "ValueError", "message": "edge x failed",
                                    "class": "validation"}
    assert len(of_kind(events, "node.reducer.completed")) == 1


# -- notify ---------------------------------------------------------------------
def test_notify_is_called_exactly_once_with_the_terminal_outcome(any_stack: Stack) -> None:
    s = any_stack
    ok_key, fail_key = notify_key(), notify_key()
    sig = s.client.celery.signature
    ok = start(s, "itest_linear", {"n": 3}, notify=sig(itest.NOTIFY_TASK, args=(ok_key,)))
    bad = start(s, "itest_linear", {"n": 3, "fail_at": 2},
                notify=sig(itest.NOTIFY_TASK, args=(fail_key,)))
    assert s.wait(ok) == {"steps": [1, 2, 3]}
    with pytest.raises(RunFailed) as failed:
        s.wait(bad)
    assert failed.value.reason == "node_failed"
    assert notified_once(s, ok_key) == {"run_id": ok.id, "status": "completed",
                                        "result": {"steps": [1, 2, 3]}}
    outcome = notified_once(s, fail_key)
    assert outcome["run_id"] == bad.id and outcome["status"] == "failed"
    assert outcome["error"]["reason"] == "node_failed"
    assert "failed on purpose" in outcome["error"]["message"]


# -- lanes ----------------------------------------------------------------------
def test_runs_of_one_lane_run_one_at_a_time_in_fifo_order(any_stack: Stack) -> None:
    s = any_stack
    lane = {"user_id": f"u-{uuid.uuid4().hex[:6]}", "session_id": "s1"}
    runs = [start(s, "itest_linear", {"n": 2, "sleep": 0.1, "tag": i}, **lane)
            for i in range(3)]
    for run in runs:
        assert s.wait(run) == {"steps": [1, 2]}
    spans = []
    for run in runs:
        events = run.events()
        terminal = assert_well_formed(events)
        (started,) = of_kind(events, "run.started")
        spans.append((started.ts, terminal.ts))
        node_ts = [e.ts for e in of_kind(events, "node.execution.started",
                                         "node.execution.completed")]
        assert all(started.ts <= t <= terminal.ts for t in node_ts)
    assert spans == sorted(spans)  # FIFO: started in the order of start()
    for (_, ended), (next_started, _) in zip(spans, spans[1:], strict=False):
        assert ended <= next_started  # no overlap
    assert "run.queued" not in [e.kind for e in runs[0].events()]
    assert all("run.queued" in [e.kind for e in r.events()] for r in runs[1:])


def test_on_busy_reject_raises_and_never_notifies(any_stack: Stack) -> None:
    s = any_stack
    lane = {"user_id": f"u-{uuid.uuid4().hex[:6]}", "session_id": "s1"}
    first_key, rejected_key = notify_key(), notify_key()
    sig = s.client.celery.signature
    first = start(s, "itest_linear", {"n": 1, "sleep": 0.3}, **lane,
                  notify=sig(itest.NOTIFY_TASK, args=(first_key,)))
    with pytest.raises(LaneBusy) as busy:
        start(s, "itest_linear", {"n": 1}, **lane, on_busy="reject",
              notify=sig(itest.NOTIFY_TASK, args=(rejected_key,)))
    assert busy.value.active_run_id == first.id
    assert s.wait(first) == {"steps": [1]}
    assert notified_once(s, first_key)["status"] == "completed"
    assert notified(s, rejected_key) == []
    after = start(s, "itest_linear", {"n": 1}, **lane, on_busy="reject")  # lane free again
    assert s.wait(after) == {"steps": [1]}


# -- timeouts and cancellation --------------------------------------------------
def test_prefork_soft_time_limit_fails_the_node_with_node_timeout(any_stack: Stack) -> None:
    """On prefork the node timeout is Celery's soft time limit: the node is
    interrupted, ``node.execution.failed`` says NodeTimeout and nothing is merged."""
    s = any_stack
    run = start(s, "itest_slow", {"node": "slow", "sleep": 6.0})
    result = s.wait(run)
    assert result == {"state": {}, "last_ok": False, "last_error": "NodeTimeout"}
    events = run.events()
    assert assert_well_formed(events).kind == "run.completed"
    (failed,) = of_kind(events, "node.execution.failed")
    assert failed.data["error"]["type"] == "NodeTimeout"
    assert failed.data["duration"] < 6.0  # interrupted, not waited out
    assert of_kind(events, "node.execution.late_result") == []


def test_cancel_during_a_node_fences_its_late_result(any_stack: Stack) -> None:
    s = any_stack
    key, token = notify_key(), uuid.uuid4().hex
    run = start(s, "itest_slow", {"node": "wait", "sleep": 1.0, "token": token},
                notify=s.client.celery.signature(itest.NOTIFY_TASK, args=(key,)))
    wait_until(lambda: s.redis.llen(itest.started_key(token)), what="the node to start",
               log=s.worker.tail)
    assert run.cancel() is True
    with pytest.raises(RunCancelled):
        s.wait(run, timeout=1.0)
    late = wait_until(lambda: of_kind(run.events(), "node.execution.late_result"),
                      what="node.execution.late_result", log=s.worker.tail)
    assert [e.data["reason"] for e in late] == ["cancelled"]
    assert late[0].data["node_id"] == "wait"
    events = run.events()
    assert assert_well_formed(events).kind == "run.cancelled"
    assert of_kind(events, "node.execution.completed", "node.execution.failed") == []
    assert s.client.store.get(run.id)["state"] == {}  # the late value was not merged
    assert run.status().status == "cancelled"
    outcome = notified_once(s, key)
    assert outcome["status"] == "cancelled" and outcome["run_id"] == run.id
    assert run.cancel() is False


def test_cancel_during_a_fan_out_fences_the_edges_that_finish_later(any_stack: Stack) -> None:
    s = any_stack
    token = uuid.uuid4().hex
    run = start(s, "itest", {"question": "q", "token": token,
                             "edges": [["a", 1.0, False], ["b", 1.0, False]]})
    wait_until(lambda: s.redis.llen(itest.started_key(token)) == 2,
               what="both edges to start (2 worker processes)", log=s.worker.tail)
    assert run.cancel() is True
    late = wait_until(lambda: len(found := of_kind(run.events(), "node.execution.late_result")) == 2
                      and found, what="a node.execution.late_result per edge", log=s.worker.tail)
    assert sorted(e.data["execution_id"] for e in late) == [f"{run.id}.2.0", f"{run.id}.2.1"]
    assert {(e.data["node_id"], e.data["reason"]) for e in late} == {("lookup", "cancelled")}
    events = run.events()
    assert assert_well_formed(events).kind == "run.cancelled"
    assert of_kind(events, "node.reducer.completed", "node.reducer.failed") == []
    assert "order" not in s.client.store.get(run.id)["state"]
