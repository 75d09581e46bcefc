"""The graph a run took, drawn from its events: a column per step, a box per node
execution (a fan-out's edges side by side, then its reducer), lines for the edges
taken, each box with its outcome and duration; as SVG, drawn here (no script, no
network: the page renders offline).

Only :data:`MAX_COLUMNS` columns are drawn (a long run says how many it left out):
the drawing stays small and quick whatever the run's length."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape

from hypha_celery.events import Event
from hypha_celery.events import payloads as ev
from hypha_celery.projections._timeline import duration

__all__ = ["MAX_COLUMNS", "Box", "Diagram", "Drawing", "diagram", "svg"]

#: Columns (steps, reducers) drawn at most.
MAX_COLUMNS = 60
_W, _H, _GAP_X, _GAP_Y, _PAD = 150, 44, 48, 14, 12
_FILL = {"completed": "#d8f3dc", "failed": "#ffd6d6", "running": "#fff3bf",
         "scheduled": "#e9ecef", "start": "#dbe4ff", "end": "#dbe4ff"}


@dataclass
class Box:
    """One node execution (or reducer, start, end) in the drawing."""

    label: str
    status: str = "scheduled"
    duration: float | None = None
    key: str = ""


@dataclass
class Diagram:
    columns: list[list[Box]] = field(default_factory=list)
    left_out: int = 0


def _box_of(index: dict[str, Box], column: list[Box], key: str, label: str) -> None:
    box = Box(label, key=key)
    index[key] = box
    column.append(box)


_ENDS = ("run.completed", "run.failed", "run.cancelled")


class Drawing:
    """The drawing folded one event at a time: a page adds its events, a live page's
    stream each new one as it is recorded (:meth:`add` says whether the drawing
    changed). Bounded however long it is fed: past ``2 * MAX_COLUMNS`` columns the
    middle ones are dropped (counted in :attr:`Diagram.left_out`), keeping the first
    and the newest (a fan-out's edges may still end)."""

    def __init__(self, *, from_start: bool = True) -> None:
        first = Box("start", "start") if from_start else Box("… earlier steps", "start")
        self._d = Diagram([[first]])
        self._index: dict[str, Box] = {}

    def add(self, e: Event) -> bool:
        kind = e.type
        if kind in ("node.execution.scheduled", "node.fanout.scheduled"):
            self._schedule(e)
        elif kind.startswith(("node.execution.", "node.reducer.")):
            return self._outcome(e)
        elif kind in _ENDS:
            self._d.columns.append([Box(kind.removeprefix("run."),
                                        "end" if kind == "run.completed" else "failed")])
        else:
            return False
        return True

    def diagram(self) -> Diagram:
        """What to draw: at most :data:`MAX_COLUMNS` columns, the first ones and the
        last."""
        columns, left_out = self._d.columns, self._d.left_out
        if len(columns) > MAX_COLUMNS:
            left_out += len(columns) - MAX_COLUMNS
            columns = columns[:MAX_COLUMNS - 1] + columns[-1:]
        return Diagram(list(columns), left_out)

    def _schedule(self, e: Event) -> None:
        p, d = e.body, self._d
        if isinstance(p, ev.NodeExecutionScheduled):
            col: list[Box] = []
            _box_of(self._index, col, str(p.execution_id), str(p.node_id))
            d.columns.append(col)
        elif isinstance(p, ev.NodeFanoutScheduled):  # its edges, then its reducer
            col = []
            for i, edge in enumerate(p.edges or []):
                _box_of(self._index, col, str(edge.get("execution_id")),
                        f"{edge.get('node_id')}#{i}")
            d.columns.append(col)
            red: list[Box] = []
            _box_of(self._index, red, f"{p.execution_id}/reduce", f"⇉ {p.reducer}")
            d.columns.append(red)
        if len(d.columns) > 2 * MAX_COLUMNS:
            self._drop(MAX_COLUMNS - 1, len(d.columns) - MAX_COLUMNS)

    def _drop(self, start: int, end: int) -> None:
        for col in self._d.columns[start:end]:
            for box in col:
                self._index.pop(box.key, None)
        self._d.left_out += end - start
        del self._d.columns[start:end]

    def _outcome(self, e: Event) -> bool:
        p = e.body
        assert isinstance(p, _Execution)
        key = str(p.execution_id)
        if e.type.startswith("node.reducer."):
            key += "/reduce"
        box = self._index.get(key)
        if box is None:
            return False
        if e.type.endswith("started"):
            box.status = "running"
            return True
        if e.type.endswith((".retrying", ".redelivered")):
            return False  # the execution goes on: its outcome follows
        box.status = "completed" if e.type.endswith("completed") else "failed"
        box.duration = duration(e)
        return True


#: The events of a node or reducer execution (``node.execution.*``, ``node.reducer.*``).
_Execution = (ev.NodeExecutionStarted | ev.NodeExecutionCompleted | ev.NodeExecutionFailed
              | ev.NodeExecutionRetrying | ev.NodeExecutionRedelivered
              | ev.NodeExecutionDeadLettered | ev.NodeExecutionLateResult
              | ev.NodeReducerCompleted | ev.NodeReducerFailed)


def diagram(events: Iterable[Event], *, from_start: bool = True) -> Diagram:
    """The drawing's boxes from a run's events, in ``seq`` order (``from_start``
    False: a page of them that starts later, drawn from an "earlier steps" box)."""
    drawing = Drawing(from_start=from_start)
    for e in events:
        drawing.add(e)
    return drawing.diagram()


def _centre_y(col: list[Box], i: int, height: int) -> int:
    used = len(col) * _H + (len(col) - 1) * _GAP_Y
    return (height - used) // 2 + i * (_H + _GAP_Y) + _H // 2


def _rect(x: int, y: int, box: Box) -> str:
    took = "" if box.duration is None else f"{box.duration * 1000:.1f} ms"
    label = escape(box.label if len(box.label) <= 20 else box.label[:19] + "…")
    return (f'<g class="box {escape(box.status)}"><title>{escape(box.label)} '
            f'{escape(box.status)} {took}</title>'
            f'<rect x="{x}" y="{y - _H // 2}" width="{_W}" height="{_H}" rx="6" '
            f'fill="{_FILL.get(box.status, "#fff")}" stroke="#495057"/>'
            f'<text x="{x + _W // 2}" y="{y - 3}" text-anchor="middle">{label}</text>'
            f'<text x="{x + _W // 2}" y="{y + 13}" text-anchor="middle" class="small">'
            f'{escape(box.status)} {took}</text></g>')


def svg(d: Diagram) -> str:
    """The drawing as one ``<svg>`` element (names escaped)."""
    tallest = max(len(c) for c in d.columns)
    height = tallest * _H + (tallest - 1) * _GAP_Y + 2 * _PAD
    width = len(d.columns) * (_W + _GAP_X) - _GAP_X + 2 * _PAD
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="run-graph" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             'aria-label="the graph this run took">']
    for c, col in enumerate(d.columns):
        x = _PAD + c * (_W + _GAP_X)
        if c:
            prev = d.columns[c - 1]
            for i in range(len(prev)):
                for j in range(len(col)):
                    parts.append(f'<line x1="{x - _GAP_X}" y1="{_centre_y(prev, i, height)}" '
                                 f'x2="{x}" y2="{_centre_y(col, j, height)}" '
                                 'stroke="#868e96"/>')
        parts.extend(_rect(x, _centre_y(col, i, height), b) for i, b in enumerate(col))
    if d.left_out:  # said between the last two columns, where the rest would be
        x = _PAD + (len(d.columns) - 1) * (_W + _GAP_X) - _GAP_X // 2
        parts.append(f'<text x="{x}" y="{_PAD}" text-anchor="middle" class="small">'
                     f'{d.left_out} more not drawn</text>')
    parts.append("</svg>")
    return "".join(parts)
