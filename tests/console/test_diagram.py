"""The run's graph drawing: columns from its decisions and fan-outs, outcomes and
durations on the boxes, names escaped, the number of columns bounded."""

from __future__ import annotations

from typing import Any

from hypha_celery.console.diagram import MAX_COLUMNS, Drawing, diagram, svg
from hypha_celery.events import Event


def ev(seq: int, kind: str, **data: Any) -> Event:
    return Event.model_validate({"run_id": "r", "seq": seq, "type": kind, "timestamp": seq,
                                 "payload": data})


def test_a_fan_out_run() -> None:
    events = [ev(1, "run.created"), ev(2, "node.execution.scheduled", execution_id="r.1",
                                       node_id="classify", step=1),
              ev(3, "node.execution.completed", execution_id="r.1", duration=0.01),
              ev(4, "node.fanout.scheduled", execution_id="r.2", reducer="merge",
                 edges=[{"node_id": "lookup", "execution_id": "r.2.0"},
                        {"node_id": "lookup", "execution_id": "r.2.1"}]),
              ev(5, "node.execution.completed", execution_id="r.2.0", duration=0.02),
              ev(6, "node.execution.failed", execution_id="r.2.1", duration=0.03),
              ev(7, "node.reducer.completed", execution_id="r.2", duration=0.001),
              ev(8, "run.completed")]
    d = diagram(events)
    assert [[b.label for b in c] for c in d.columns] == [
        ["start"], ["classify"], ["lookup#0", "lookup#1"], ["⇉ merge"], ["completed"]]
    assert [b.status for b in d.columns[2]] == ["completed", "failed"]
    assert d.columns[3][0].duration == 0.001
    drawn = svg(d)
    assert drawn.startswith("<svg") and "20.0 ms" in drawn and drawn.count("<line") == 1 + 2 + 2 + 1


def test_names_are_escaped_and_columns_bounded() -> None:
    events = [ev(1, "run.created")] + [
        ev(i + 2, "node.execution.scheduled", execution_id=f"r.{i}", node_id="<b>&x")
        for i in range(MAX_COLUMNS + 10)]
    d = diagram(events)
    assert len(d.columns) == MAX_COLUMNS and d.left_out == 11
    drawn = svg(d)
    assert "<b>" not in drawn and "&lt;b&gt;&amp;x" in drawn
    assert "11 more not drawn" in drawn


def test_a_live_drawing_stays_bounded_however_long_it_is_fed() -> None:
    drawing = Drawing()
    for i in range(10 * MAX_COLUMNS):
        drawing.add(ev(2 * i + 2, "node.execution.scheduled", execution_id=f"r.{i}",
                       node_id=f"n{i}"))
        drawing.add(ev(2 * i + 3, "node.execution.retrying", execution_id=f"r.{i}"))
    assert len(drawing._d.columns) <= 2 * MAX_COLUMNS and len(drawing._index) <= 2 * MAX_COLUMNS
    d = drawing.diagram()
    assert len(d.columns) == MAX_COLUMNS and d.left_out == 10 * MAX_COLUMNS + 1 - MAX_COLUMNS
    assert d.columns[-1][0].label == f"n{10 * MAX_COLUMNS - 1}"
    assert d.columns[-1][0].status == "scheduled"  # retrying is not an outcome
    assert drawing.add(ev(9999, "node.execution.completed", execution_id="r.599",
                          duration=0.5)) is True
    assert drawing.diagram().columns[-1][0].status == "completed"
    assert drawing.add(ev(10000, "node.execution.completed", execution_id="r.70")) is False
