"""What a run's page shows, built from its events in one read: the nested timeline (a
page of it), the steps with the state each decision saw, the model and tool calls
with their usage, the graph drawing and, on request, the diff against a replay
fixture. Bounds: :data:`TIMELINE_PAGE` rows, :data:`STEPS_PAGE` steps and
:data:`CALLS_SHOWN` calls a page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hypha_celery.console.content import Shown, shown
from hypha_celery.console.diagram import diagram, svg
from hypha_celery.events import Event, apply_event, new_view
from hypha_celery.projections.run import RunView, run_view
from hypha_celery.projections.timeline import TimelineRow, rows
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
    view, found, total = new_view(events[0].run_id), [], 0
    for e in events:
        if e.type == "decision.policy.recorded":
            if first <= total < first + STEPS_PAGE:
                d = e.data
                state = [(str(k), shown(v, content)) for k, v in dict(view["state"]).items()]
                found.append(StepRow(int(d.get("step", total)), str(d.get("type", "")),
                                     ", ".join(map(str, d.get("node_ids") or [])), e.ts, state))
            total += 1
        apply_event(view, e.kind, e.data, e.ts)
    return found, total


def _usage(d: dict[str, Any]) -> tuple[str, str]:
    usage = d.get("usage") if isinstance(d.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    tokens = (f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"
              if usage else "")
    cost = d.get("cost_usd")
    return tokens, (f"${cost:.6f}" if isinstance(cost, int | float) else "")


def _calls(timeline: Sequence[TimelineRow], content: bool) -> tuple[list[CallRow], int]:
    found: list[CallRow] = []
    total = 0
    for row in timeline:
        e = row.event
        if not e.type.startswith(("model.call.", "tool.call.")) or e.type.endswith(
                (".started", ".requested")):
            continue
        total += 1
        if len(found) >= CALLS_SHOWN:
            continue
        kind = "model" if e.type.startswith("model.") else "tool"
        tokens, cost = _usage(dict(e.data))
        output = e.data.get("output")
        found.append(CallRow(e.seq, kind, str(e.data.get(kind, "")),
                             e.type.rsplit(".", 1)[1], row.duration, tokens, cost,
                             None if output is None else shown(output, content)))
    return found, total


def run_page(events: Sequence[Event], *, after: int = 0, steps_from: int = 0,
             content: bool = False) -> RunPage:
    """The page of a run (``events``: all of its events, in ``seq`` order); the
    timeline from ``seq > after``, the steps from the ``steps_from``-th decision."""
    view = run_view(events)
    timeline = list(rows(events))
    shown_rows = [r for r in timeline if r.event.seq > after][:TIMELINE_PAGE]
    more = shown_rows and shown_rows[-1].event.seq < events[-1].seq
    steps, total = _steps(events, steps_from, content)
    calls, calls_total = _calls(timeline, content)
    first = events[0]
    result = None if not view.done else shown(view.output, content)
    return RunPage(view, first.ts, shown_rows, shown_rows[-1].event.seq if more else None,
                   steps, steps_from, total, calls, calls_total, svg(diagram(events)),
                   shown(first.data.get("input"), content), result, events[-1].seq)


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
