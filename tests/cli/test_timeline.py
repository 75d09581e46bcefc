"""The human timeline: one line per event, names and reasons, never payloads."""

from __future__ import annotations

import io

import pytest

from hypha_celery import Event
from hypha_celery.cli.timeline import format_event, summary, timeline, use_colour

RUN = "r1"
SECRET = "sk-secret-prompt-text"


def ev(seq: int, kind: str, ts: float = 100.0, **data: object) -> Event:
    return Event(run_id=RUN, seq=seq, type=kind, timestamp=ts, payload=data)  # type: ignore[arg-type]


def test_one_line_per_event_with_relative_ms_seq_kind_and_duration() -> None:
    evs = [
        ev(1, "run.created", 100.0, graph_id="support", input={"question": SECRET}),
        ev(2, "node.execution.completed", 100.25, execution_id=f"{RUN}.1", node_id="classify",
           update={"topic": SECRET}, duration=0.0123),
        ev(3, "run.completed", 100.5, result={"answer": SECRET}),
    ]
    lines = list(timeline(evs))
    assert len(lines) == 3
    assert lines[0].split() == ["+0.0ms", "1", "run.created", "graph", "support"]
    assert lines[1].split() == ["+250.0ms", "2", "node.execution.completed", "classify", "12.3ms"]
    assert lines[2].split() == ["+500.0ms", "3", "run.completed", "total", "500.0ms"]


@pytest.mark.parametrize(("event", "expected"), [
    (ev(1, "decision.policy.recorded", step=1, type="fanout", reducer="merge",
        node_ids=["lookup", "lookup", "lookup"]), "step 1: fan-out lookup x3 -> merge"),
    (ev(1, "decision.policy.recorded", step=0, type="next", node_ids=["classify"]),
     "step 0: next classify"),
    (ev(1, "decision.policy.recorded", step=3, type="finish"), "step 3: finish"),
    (ev(1, "node.fanout.scheduled", execution_id=f"{RUN}.2", step=2, reducer="merge",
        edges=[{"node_id": "lookup", "input": SECRET}, {"node_id": "wiki", "input": SECRET}]),
     "lookup#0, wiki#1 -> merge (step 2)"),
    (ev(1, "node.execution.started", execution_id=f"{RUN}.2.1", node_id="lookup", attempt=2,
        worker="h:1"), "lookup#1  attempt 2"),
    (ev(1, "node.execution.failed", execution_id=f"{RUN}.2.0", node_id="lookup", edge_of=f"{RUN}.2",
        error={"type": "ValueError", "message": SECRET}, duration=0.1), "lookup#0  ValueError"),
    (ev(1, "node.reducer.completed", execution_id=f"{RUN}.2", reducer="merge",
        update={"docs": SECRET}), "merge"),
    (ev(1, "node.execution.late_result", execution_id=f"{RUN}.4", node_id="answer",
        reason="timeout"),
     "answer  timeout"),
    (ev(1, "run.failed", reason="node_failed", message=f"classify: ValueError: {SECRET}"),
     "node_failed"),
    (ev(1, "run.queued", behind="r0"), "behind r0"),
    (ev(1, "recovery.run.redriven", execution_id=f"{RUN}.2", attempt=1,
        why="no outcome within the stall timeout"), "no outcome within the stall timeout"),
    (ev(1, "node.execution.retrying", execution_id=f"{RUN}.2", node_id="lookup", attempt=1,
        delay=0.5, error={"type": "TimeoutError", "message": SECRET}),
     "lookup  attempt 1 failed (TimeoutError), retry in 0.5s"),
    (ev(1, "tool.policy.checked", call_id="c0", tool="search",
        decision={"allowed": True, "requires_review": True}), "allowed  review required"),
    (ev(1, "model.call.failed", call_id="c1", model="gpt", error={"type": "RateLimited"}),
     "gpt  RateLimited"),
    (ev(1, "fsm.transition.rejected", **{"from": "draft"}, to="sent", reason="guard"),
     "draft -> sent  guard"),
])
def test_summaries_name_nodes_and_reasons_but_never_payloads(event: Event, expected: str) -> None:
    assert summary(event) == expected
    assert SECRET not in format_event(event, 100.0)


def test_a_recovery_redrive_says_why() -> None:
    """The supervisor writes its reason as ``why``: the summary read ``reason`` (never
    written) and was empty; reading the payload model makes such a slip a mypy error."""
    event = ev(1, "recovery.run.redriven", execution_id=None, attempt=2, why="worker lost")
    assert summary(event) == "worker lost"


def test_an_event_without_a_field_its_writer_always_writes_has_no_summary() -> None:
    """A log written elsewhere (an import) may lack one: no summary, no error."""
    assert summary(ev(1, "node.execution.redelivered", execution_id=f"{RUN}.1")) == ""
    assert summary(ev(1, "recovery.node.timed_out")) == ""
    assert format_event(ev(1, "recovery.node.timed_out"), 100.0).split() == [
        "+0.0ms", "1", "recovery.node.timed_out"]


def test_colour_only_when_asked() -> None:
    event = ev(1, "run.completed", 100.0)
    assert "\x1b[" not in format_event(event, 100.0)
    coloured = format_event(event, 100.0, colour=True)
    assert "\x1b[" in coloured
    assert coloured.count("\n") == 0


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_use_colour_needs_a_terminal_and_no_NO_COLOR(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(_Stream(tty=True))
    assert not use_colour(_Stream(tty=False))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(_Stream(tty=True))


def test_nested_by_step_execution_and_call_with_call_durations() -> None:
    eid = f"{RUN}.1"

    def call(seq: int, kind: str, ts: float, **data: object) -> Event:
        return Event(run_id=RUN, seq=seq, type=kind, timestamp=ts,  # type: ignore[arg-type]
                     correlation_id=f"{eid}:m0", payload=data)

    evs = [
        ev(1, "run.created", 100.0, graph_id="g"),
        ev(2, "decision.policy.recorded", 100.1, step=0, type="next", node_ids=["think"]),
        ev(3, "node.execution.scheduled", 100.1, execution_id=eid, node_id="think", step=1),
        ev(4, "node.execution.retrying", 100.2, execution_id=eid, node_id="think", attempt=1,
           delay=0.05, error={"type": "ConnectionError", "message": SECRET}),
        ev(5, "node.execution.started", 100.3, execution_id=eid, node_id="think", attempt=2),
        call(6, "model.call.started", 100.3, model="small-llm", request_hash="ab"),
        call(7, "model.call.completed", 100.325, model="small-llm", output=SECRET),
        ev(8, "node.execution.completed", 100.4, execution_id=eid, node_id="think",
           update={"x": SECRET}, duration=0.1),
        ev(9, "run.completed", 100.5, result=SECRET),
    ]
    lines = list(timeline(evs))
    indents = [len(line[17:]) - len(line[17:].lstrip()) for line in lines]
    assert indents == [0, 2, 2, 4, 4, 6, 6, 4, 0]
    assert lines[3].split()[2:] == ["node.execution.retrying", "think", "attempt", "1",
                                    "failed", "(ConnectionError),", "retry", "in", "0.05s"]
    assert lines[6].split()[2:] == ["model.call.completed", "small-llm", "25.0ms"]
    assert all(SECRET not in line for line in lines)
