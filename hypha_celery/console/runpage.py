"""What a run's page shows: the run's facts (from its projection row), then a page of
its events -- at most :data:`TIMELINE_PAGE` -- and what happened in them: the nested
timeline, the steps with the state each decision saw, the model and tool calls with
their usage, the graph drawing; on request, the diff against a replay fixture.

A page reads only its own events as envelopes; the state before it comes from the
store's cheaper ``history`` of the events before the page, folded. So a page of a
10,000-event run costs what a page of a short one does, plus that fold. Bounds:
:data:`TIMELINE_PAGE` rows, :data:`STEPS_PAGE` steps and :data:`CALLS_SHOWN` calls a
page."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypha_celery.console.content import Shown, shown
from hypha_celery.console.diagram import diagram, svg
from hypha_celery.events import TERMINAL_STATUSES, Event, View, apply_event, new_view
from hypha_celery.projections.timeline import TimelineRow, rows
from hypha_celery.replay.compare import FAMILIES, TraceDiff, compare, describe
from hypha_celery.replay.fixture import ReplayFixture

__all__ = ["CALLS_SHOWN", "STEPS_PAGE", "TIMELINE_PAGE", "CallRow", "DiffRow", "Header",
           "RunPage", "StepRow", "diff_rows", "run_page"]

#: Timeline rows a page shows (then a link to the next page).
TIMELINE_PAGE = 500
#: Decisions (with the state they saw) a page shows.
STEPS_PAGE = 50
#: Model and tool calls a page lists at most.
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


@dataclass(frozen=True, slots=True)
class Header:
    """The run's facts, from its projection row (never from a read of its events)."""

    status: str
    graph_id: str | None
    user_id: str | None
    session_id: str | None
    steps: int
    events: int
    created_at: float
    duration: float | None
    error: str | None
    message: str | None
    done: bool

    @classmethod
    def of(cls, view: View) -> Header:
        done = view["status"] in TERMINAL_STATUSES
        created = view["created_at"] or 0.0
        error = view["error"]
        return cls(str(view["status"]), view["graph_id"], view["user_id"],
                   view["session_id"], int(view["step"]), int(view.get("seq", 0)), created,
                   (view["updated_at"] or created) - created if done else None,
                   None if error is None else error["reason"],
                   None if error is None else error["message"], done)


@dataclass
class RunPage:
    view: Header
    t0: float
    rows: list[TimelineRow]
    first_seq: int
    next_after: int | None
    steps: list[StepRow]
    calls: list[CallRow]
    graph: str
    input: Shown
    result: Shown | None
    last_seq: int
    diff: list[DiffRow] = field(default_factory=list)


def _usage(d: dict[str, Any]) -> tuple[str, str]:
    usage = d.get("usage") if isinstance(d.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    tokens = (f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"
              if usage else "")
    cost = d.get("cost_usd")
    return tokens, (f"${cost:.6f}" if isinstance(cost, int | float) else "")


def _is_call_end(kind: str) -> bool:
    """A model or tool call's outcome (not its start or request)."""
    return kind.startswith(("model.call.", "tool.call.")) and not kind.endswith(
        (".started", ".requested"))


def _call(e: Event, took: float | None, content: bool) -> CallRow:
    kind = "model" if e.type.startswith("model.") else "tool"
    tokens, cost = _usage(dict(e.data))
    output = e.data.get("output")
    return CallRow(e.seq, kind, str(e.data.get(kind, "")), e.type.rsplit(".", 1)[1], took,
                   tokens, cost, None if output is None else shown(output, content))


def _step_row(e: Event, folded: View, content: bool) -> StepRow:
    d = e.data
    state = [(str(k), shown(v, content)) for k, v in dict(folded["state"]).items()]
    return StepRow(int(d.get("step", 0)), str(d.get("type", "")),
                   ", ".join(map(str, d.get("node_ids") or [])), e.ts, state)


def _fold(run_id: str, prior: Iterable[tuple[str, Mapping[str, Any], float]]) -> View:
    folded = new_view(run_id)
    for kind, data, ts in prior:
        apply_event(folded, kind, data, ts)
    return folded


def run_page(view: View, prior: Iterable[tuple[str, Mapping[str, Any], float]],
             window: Sequence[Event], *, content: bool = False) -> RunPage:
    """The page of a run whose projection row is ``view``: ``window`` is the page's
    events (at most :data:`TIMELINE_PAGE`, in ``seq`` order), ``prior`` the events
    before it as ``(kind, data, ts)`` (what the store's ``history`` gives: folded for
    the state the page's first decision saw). Every section shows what happened in the
    window: its timeline rows, its decisions with their state, its calls, its columns
    of the drawing. Pure."""
    folded = _fold(view["run_id"], prior)
    shown_rows = list(rows(window))
    steps, calls = list[StepRow](), list[CallRow]()
    for r in shown_rows:
        e = r.event
        if e.type == "decision.policy.recorded" and len(steps) < STEPS_PAGE:
            steps.append(_step_row(e, folded, content))
        elif _is_call_end(e.type) and len(calls) < CALLS_SHOWN:
            calls.append(_call(e, r.duration, content))
        apply_event(folded, e.kind, e.data, e.ts)
    first = window[0].seq if window else 1
    last = int(view.get("seq", 0))
    more = bool(window) and window[-1].seq < last
    header = Header.of(view)
    return RunPage(header, header.created_at, shown_rows, first,
                   window[-1].seq if more else None, steps, calls,
                   svg(diagram(window, from_start=first == 1)),
                   shown(view["input"], content),
                   shown(view["result"], content) if header.status == "completed" else None,
                   last)


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
