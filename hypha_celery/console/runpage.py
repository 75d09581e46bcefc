"""What a run's page shows, built from its events in one read: the nested timeline (a
page of it), the steps with the state each decision saw, the model and tool calls
with their usage, the graph drawing and, on request, the diff against a replay
fixture. Bounds: :data:`TIMELINE_PAGE` rows, :data:`STEPS_PAGE` steps and
:data:`CALLS_SHOWN` calls a page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from hypha_celery.console.content import Shown, shown
from hypha_celery.console.diagram import diagram, svg
from hypha_celery.events import Event, View, apply_event, new_view
from hypha_celery.projections.run import RunView, run_view
from hypha_celery.projections.timeline import TimelineRow, row, timed
from hypha_celery.replay.compare import FAMILIES, TraceDiff, compare, describe
from hypha_celery.replay.fixture import ReplayFixture

__all__ = ["CALLS_SHOWN", "STEPS_PAGE", "TIMELINE_PAGE", "CallRow", "DiffRow", "RunPage",
           "StepRow", "diff_rows", "run_page"]

#: Timeline rows a page shows (then a link to the next page).
TIMELINE_PAGE = 500
#: Steps (with their state) a page shows.
STEPS_PAGE = 50
#: Model and tool calls listed at most.
CALLS_SHOWN = 200
#: Families whose diff lines carry content (outputs): shown only with content on.
_CONTENT_FAMILIES = frozenset({"tool_calls", "output"})


@dataclass(frozen=True, slots=True)
class StepRow:
    step: int
    decision: str
    nodes: str
    at: float
    state: list[tuple[str, Shown]]


@dataclass(frozen=True, slots=True)
class CallRow:
    seq: int
    kind: str
    name: str
    outcome: str
    duration: float | None
    usage: str
    cost: str
    output: Shown | None


@dataclass(frozen=True, slots=True)
class DiffRow:
    family: str
    passed: bool
    detail: str


@dataclass
class RunPage:
    view: RunView
    t0: float
    rows: list[TimelineRow]
    next_after: int | None
    steps: list[StepRow]
    steps_from: int
    steps_total: int
    calls: list[CallRow]
    calls_total: int
    graph: str
    input: Shown
    result: Shown | None
    last_seq: int
    diff: list[DiffRow] = field(default_factory=list)


def _steps(events: Sequence[Event], first: int, content: bool) -> tuple[list[StepRow], int]:
    """The page of steps from the ``first``-th decision, each with the state it saw,
    and how many decisions the run recorded. The run is folded only as far as the
    page's last decision; the rest are only counted."""
    view, found, total = new_view(events[0].run_id), list[StepRow](), 0
    end = first + STEPS_PAGE
    for n, e in enumerate(events):
        if e.type == "decision.policy.recorded":
            if total >= end:
                return found, total + _decisions(events, n)
            if first <= total:
                found.append(_step_row(e, view, total, content))
            total += 1
        apply_event(view, e.kind, e.data, e.ts)
    return found, total


def _decisions(events: Sequence[Event], start: int) -> int:
    return sum(1 for i in range(start, len(events))
               if events[i].type == "decision.policy.recorded")


def _step_row(e: Event, view: View, n: int, content: bool) -> StepRow:
    d = e.data
    state = [(str(k), shown(v, content)) for k, v in dict(view["state"]).items()]
    return StepRow(int(d.get("step", n)), str(d.get("type", "")),
                   ", ".join(map(str, d.get("node_ids") or [])), e.ts, state)


def _usage(d: dict[str, Any]) -> tuple[str, str]:
    usage = d.get("usage") if isinstance(d.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    tokens = (f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"
              if usage else "")
    cost = d.get("cost_usd")
    return tokens, (f"${cost:.6f}" if isinstance(cost, int | float) else "")


@lru_cache(maxsize=256)
def _is_call_end(kind: str) -> bool:
    """A model or tool call's outcome (not its start or request)."""
    return kind.startswith(("model.call.", "tool.call.")) and not kind.endswith(
        (".started", ".requested"))


def _call_ends(events: Sequence[Event], start: int) -> int:
    return sum(1 for i in range(start, len(events)) if _is_call_end(events[i].type))


def _call(e: Event, took: float | None, content: bool) -> CallRow:
    kind = "model" if e.type.startswith("model.") else "tool"
    tokens, cost = _usage(dict(e.data))
    output = e.data.get("output")
    return CallRow(e.seq, kind, str(e.data.get(kind, "")), e.type.rsplit(".", 1)[1], took,
                   tokens, cost, None if output is None else shown(output, content))


@dataclass
class _Read:
    """One pass over the events: the timeline's page and the calls."""

    rows: list[TimelineRow] = field(default_factory=list)
    calls: list[CallRow] = field(default_factory=list)
    calls_total: int = 0


def _read(events: Sequence[Event], after: int, content: bool) -> _Read:
    """The timeline rows from ``seq > after`` (a page) and the calls (the first
    :data:`CALLS_SHOWN` and how many): only the rows shown get their summary, and once
    both lists are full the rest of the calls are only counted."""
    read = _Read()
    for n, (e, took) in enumerate(timed(events)):
        if len(read.calls) >= CALLS_SHOWN and len(read.rows) >= TIMELINE_PAGE:
            read.calls_total += _call_ends(events, n)
            break
        if e.seq > after and len(read.rows) < TIMELINE_PAGE:
            read.rows.append(row(e, took))
        if _is_call_end(e.type):
            read.calls_total += 1
            if len(read.calls) < CALLS_SHOWN:
                read.calls.append(_call(e, took, content))
    return read


def run_page(events: Sequence[Event], *, after: int = 0, steps_from: int = 0,
             content: bool = False) -> RunPage:
    """The page of a run (``events``: all of its events, in ``seq`` order); the
    timeline from ``seq > after``, the steps from the ``steps_from``-th decision."""
    view = run_view(events)
    read = _read(events, after, content)
    shown_rows = read.rows
    more = shown_rows and shown_rows[-1].event.seq < events[-1].seq
    steps, total = _steps(events, steps_from, content)
    first = events[0]
    result = None if not view.done else shown(view.output, content)
    return RunPage(view, first.ts, shown_rows, shown_rows[-1].event.seq if more else None,
                   steps, steps_from, total, read.calls, read.calls_total,
                   svg(diagram(events)), shown(first.data.get("input"), content), result,
                   events[-1].seq)


def diff_rows(fixture: ReplayFixture, events: Sequence[Event], content: bool) -> list[DiffRow]:
    """The run against ``fixture``, family by family (content families say only
    whether they differ unless content is on)."""
    diff: TraceDiff = compare(fixture, events)
    out = []
    for name in FAMILIES:
        fam = diff.family(name)
        detail = describe(fam)
        if detail and name in _CONTENT_FAMILIES and not content:
            detail = "differs (content hidden)"
        out.append(DiffRow(name, fam.passed, detail))
    return out
