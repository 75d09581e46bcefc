"""Trace completeness: envelope, required types, terminal run, lifecycle pairs by
correlation id (execution / call / review id), on hand-built and real runs."""

from __future__ import annotations

import math

import pytest

from hypha_celery.evaluation import TraceSpec, evaluate_trace
from hypha_celery.events import Event
from tests.replay.support import agent_graph, app, completed_run_events, ev, finished, support_graph


def ids(events: list[Event], **kw: object) -> list[str]:
    return [c.id for c in evaluate_trace(events, **kw).checks  # type: ignore[arg-type]
            if not c.passed]


def test_hypha_trace_completeness_scenario() -> None:
    """hypha §4 scenario 15."""
    events = [ev(1, "run.started", id="e1", run_id="run_trace"),
              ev(2, "model.call.started", {"model": "mock"}, id="e2", run_id="run_trace",
                 step="reason")]
    found = evaluate_trace(events, run_id="run_trace", required=["run.started", "run.completed"])
    assert not found.passed and found.kind == "trace_completeness"
    assert [c.id for c in found.checks] == ["trace.required.run.completed", "trace.run.terminal",
                                            "trace.lifecycle.e2"]
    assert found.id == "trace.completeness" and found.score == 0.0


def test_a_complete_trace_has_one_passing_check() -> None:
    found = evaluate_trace(completed_run_events(), run_id="run_replay",
                           required=["tool.call.completed"])
    assert found.passed and [c.id for c in found.checks] == ["trace.complete"]


def test_envelope_checks() -> None:
    assert ids([]) == ["trace.events.present"]
    nan = ev(2, "run.completed").model_copy(update={"timestamp": math.nan})
    events = [ev(1, "run.started", id=""), nan, ev(3, "eval.started", run_id="other"),
              ev(4, "eval.completed").model_copy(update={"run_id": ""})]
    assert ids(events, run_id="run_replay") == ["event[0].id", "event[1].timestamp",
                                                "event[2].run_id.matches", "event[3].run_id"]
    unknown = Event.model_construct(**{**ev(1, "run.started").model_dump(), "type": "run.odd"})
    assert ids([unknown]) == ["event[0].type"]


def test_pairs_are_matched_by_call_id_not_by_step() -> None:
    """Two calls in one step, one of them never ends: hypha's run+step pairing would let
    the other call's terminal close both."""
    call = {"execution_id": "r.1", "step": 1, "node_id": "n", "tool": "search"}
    events = [ev(1, "tool.call.started", {**call, "call_id": "a"}, step="1"),
              ev(2, "tool.call.started", {**call, "call_id": "b"}, step="1"),
              ev(3, "tool.call.completed", {**call, "call_id": "a", "output": 1}, step="1")]
    assert ids(events) == ["trace.lifecycle.run_replay:2"]


def test_a_terminal_must_come_after_its_start() -> None:
    call = {"call_id": "m1", "model": "x", "step": 1}
    events = [ev(1, "model.call.completed", call), ev(2, "model.call.started", call)]
    assert ids(events) == ["trace.lifecycle.run_replay:2"]
    assert ids(list(reversed(events))) == []


@pytest.mark.parametrize(("start", "end", "key"), [
    ("node.execution.started", "node.execution.late_result", "execution_id"),
    ("node.execution.started", "node.execution.failed", "execution_id"),
    ("tool.call.started", "tool.call.rejected", "call_id"),
    ("model.call.started", "model.call.failed", "call_id"),
    ("human.review.requested", "human.review.expired", "review_id"),
])
def test_every_lifecycle_pair(start: str, end: str, key: str) -> None:
    events = [ev(1, start, {key: "x.1"}), ev(2, end, {key: "x.1"})]
    assert ids(events) == []
    assert ids([events[0], ev(2, end, {key: "x.2"})]) == ["trace.lifecycle.run_replay:1"]


def test_terminal_run_rules() -> None:
    assert ids([ev(1, "run.started"), ev(2, "run.waiting_human")]) == []
    assert ids([ev(1, "run.created")]) == []  # not started: nothing to end
    assert ids([ev(1, "run.started")]) == ["trace.run.terminal"]
    relaxed = TraceSpec(id="t", require_terminal_run=False, enforce_lifecycle_pairs=False,
                        event_types=["run.created"])
    found = evaluate_trace([ev(1, "run.started"), ev(2, "model.call.started")], relaxed)
    assert [c.id for c in found.checks] == ["trace.required.run.created"] and found.id == "t"


def test_real_runs_are_complete(store_url: str) -> None:
    with app(store_url, support_graph(), agent_graph) as hypha:
        for graph in ("support", "agent"):
            run_id = finished(hypha, graph)
            events = hypha.store.events(run_id)
            found = evaluate_trace(events, run_id=run_id,
                                   required=["run.completed", "node.fanout.scheduled"])
            assert found.passed, found.failed_checks()
        # the agent run's calls pair by call id, across a parallel fan-out
        starts = [e for e in events if e.type == "tool.call.started"]
        assert len({e.correlation_id for e in starts}) == 2
        truncated = [e for e in events if e.id != _completion_of(events, starts[0]).id]
        assert ids(truncated) == [f"trace.lifecycle.{starts[0].id}"]


def _completion_of(events: list[Event], start: Event) -> Event:
    return next(e for e in events
                if e.type == "tool.call.completed" and e.correlation_id == start.correlation_id)
