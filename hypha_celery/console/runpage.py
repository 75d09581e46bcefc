"""What a run's page shows: the run's facts (from its projection row), then a page of
its events -- at most :data:`TIMELINE_PAGE` -- and what happened in them: the nested
timeline, the steps with the state each decision saw, the model and tool calls with
their usage, the graph drawing; on request, the diff against a replay fixture.

The timeline is in ``seq`` order, the order the store recorded the events in. Its times
are each event's own stamp, from one of two clocks (:class:`Clock`): a node's start and
outcome and its model and tool calls are stamped by the worker that ran the node, when
they happened; every other event by the process that recorded it, when it did. So a
time may be earlier than the one of the row before it (a call that happened before the
decision recorded just ahead of it, or two machines' clocks apart): the row says so
(:attr:`ShownRow.behind`) rather than being moved.

A page reads only its own events as envelopes; the state before it comes from the
store's cheaper ``history`` of the events before the page, folded. So a page of a
10,000-event run costs what a page of a short one does, plus that fold. Bounds:
:data:`TIMELINE_PAGE` rows, :data:`STEPS_PAGE` steps and :data:`CALLS_SHOWN` calls a
page."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hypha_celery.console.content import Shown, shown
from hypha_celery.console.diagram import diagram, svg
from hypha_celery.events import TERMINAL_STATUSES, Event, View, apply_event, new_view
from hypha_celery.events import payloads as ev
from hypha_celery.events.view import CaseDoc
from hypha_celery.projections._timeline import TimelineRow, rows
from hypha_celery.replay._compare import FAMILIES, TraceDiff, compare, describe
from hypha_celery.replay._fixture import ReplayFixture

__all__ = ["CALLS_SHOWN", "DEAD_LETTERS_SHOWN", "NODE_CLOCK", "STEPS_PAGE", "TIMELINE_PAGE",
           "CallRow", "Clock", "ContextRow", "DeadLetterLink", "DiffRow", "Header", "RunPage",
           "ShownRow", "StepRow", "diff_rows", "run_page", "shown_rows"]

#: Timeline rows a page shows (then a link to the next page).
TIMELINE_PAGE = 500
#: Decisions (with the state they saw) a page shows.
STEPS_PAGE = 50
#: Model and tool calls a page lists at most.
CALLS_SHOWN = 200
#: Dead letters of the run a page links to at most (newest first).
DEAD_LETTERS_SHOWN = 20
#: Families whose diff lines carry content (outputs): shown only with content on.
_CONTENT_FAMILIES = frozenset({"tool_calls", "output"})


class Clock(StrEnum):
    """Whose clock stamped an event's time, and when."""

    #: The worker that ran the node, when it happened (it reports it with the outcome).
    NODE = "node"
    #: The process that recorded the event, when its transaction appended it.
    RECORDED = "recorded"


#: The kinds stamped by the worker that ran the node (``runtime/attempts.py``, the
#: outcome's time in ``runtime/coordinator.py``); every other kind is stamped when it
#: is recorded.
NODE_CLOCK = frozenset({
    "node.execution.started", "node.execution.completed", "node.execution.failed",
    "model.call.started", "model.call.completed", "model.call.failed",
    "tool.call.started", "tool.call.completed", "tool.call.failed"})


@dataclass(frozen=True, slots=True)
class ShownRow:
    """A timeline row as a page shows it: its time since the run was created, whose
    clock that is, and by how much it is earlier than the row before it (None: not)."""

    row: TimelineRow
    offset: float
    clock: Clock
    behind: float | None
    before_seq: int | None


def shown_rows(timeline: Iterable[TimelineRow], t0: float,
               previous: tuple[int, float] | None = None) -> Iterator[ShownRow]:
    """``timeline`` (in ``seq`` order) as shown rows, times from ``t0``; ``previous``:
    the ``(seq, ts)`` of the event before the first (a later page, a live stream)."""
    for row in timeline:
        e = row.event
        behind = None
        if previous is not None and e.ts < previous[1]:
            behind = previous[1] - e.ts
        yield ShownRow(row, e.ts - t0, Clock.NODE if e.type in NODE_CLOCK else Clock.RECORDED,
                       behind, previous[0] if previous else None)
        previous = (e.seq, e.ts)


@dataclass(frozen=True, slots=True)
class DeadLetterLink:
    """A dead letter of the run, for a link to its record."""

    id: int
    status: str
    reason: str


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
    #: a failed model call's kind (``rate_limited``, ``incomplete_stream`` ...)
    error_kind: str | None = None


@dataclass
class ContextRow:
    """What went into one model call (a ``context.build.*``): tokens per source, items,
    what compaction did (``source: strategy items before -> after``), the skills loaded
    (``id@version``), and the memory records read at its step (``id@revision``): sizes,
    references and hashes, never text (none is recorded)."""

    seq: int
    step: int | None
    build_id: str
    outcome: str  # completed | failed
    tokens: int = 0
    items: int = 0
    dropped: int = 0
    sources: list[tuple[str, int, int]] = field(default_factory=list)  # source, items, tokens
    compactions: list[str] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)
    memory: list[str] = field(default_factory=list)
    context_hash: str = ""
    reason: str = ""


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
    dead_letters: tuple[DeadLetterLink, ...] = ()

    @classmethod
    def of(cls, view: View, letters: Iterable[Mapping[str, Any]] = ()) -> Header:
        """The facts of ``view``, with ``letters``: the run's dead-letter records."""
        done = view["status"] in TERMINAL_STATUSES
        created = view["created_at"] or 0.0
        error = view["error"]
        return cls(str(view["status"]), view["graph_id"], view["user_id"],
                   view["session_id"], int(view["step"]), int(view.get("seq", 0)), created,
                   (view["updated_at"] or created) - created if done else None,
                   None if error is None else error["reason"],
                   None if error is None else error["message"], done,
                   tuple(DeadLetterLink(int(d["id"]), str(d["status"]), str(d["reason"]))
                         for d in letters))


@dataclass
class RunPage:
    view: Header
    t0: float
    rows: list[ShownRow]
    first_seq: int
    next_after: int | None
    steps: list[StepRow]
    calls: list[CallRow]
    graph: str
    input: Shown
    result: Shown | None
    last_seq: int
    diff: list[DiffRow] = field(default_factory=list)
    #: A workflow's state and its last recovery case (ids, statuses, hashes, reasons).
    workflow_state: str | None = None
    case: CaseDoc | None = None
    #: What went into each model call of the page (at most :data:`CALLS_SHOWN`).
    contexts: list[ContextRow] = field(default_factory=list)


#: A call's end: what the page's calls list.
_CallEnd = (ev.ModelCallCompleted | ev.ModelCallFailed | ev.ToolCallCompleted | ev.ToolCallFailed
            | ev.ToolCallApproved | ev.ToolCallRejected)
_Measured = ev.ModelCallCompleted | ev.ModelCallFailed | ev.ToolCallCompleted | ev.ToolCallFailed


def _usage(p: _CallEnd) -> tuple[str, str]:
    if not isinstance(p, _Measured):
        return "", ""
    usage = p.usage if isinstance(p.usage, dict) else {}
    tokens = (f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"
              if usage else "")
    cost = p.cost_usd
    return tokens, (f"${cost:.6f}" if isinstance(cost, int | float) else "")


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _is_call_end(kind: str) -> bool:
    """A model or tool call's outcome (not its start or request)."""
    return kind.startswith(("model.call.", "tool.call.")) and not kind.endswith(
        (".started", ".requested"))


def _call(e: Event, took: float | None, content: bool) -> CallRow:
    p = e.body
    assert isinstance(p, _CallEnd)
    if isinstance(p, ev.ModelCallCompleted | ev.ModelCallFailed):
        family, name = "model", p.model
    else:
        family, name = "tool", p.tool
    tokens, cost = _usage(p)
    output = p.output if isinstance(p, ev.ModelCallCompleted | ev.ToolCallCompleted) else None
    error_kind = p.error_kind if isinstance(p, ev.ModelCallFailed) else None
    return CallRow(e.seq, family, _text(name),
                   e.type.rsplit(".", 1)[1], took, tokens, cost,
                   None if output is None else shown(output, content),
                   error_kind if isinstance(error_kind, str) else None)


def _step_row(e: Event, folded: View, content: bool) -> StepRow:
    p = e.body_as(ev.DecisionPolicyRecorded)
    state = [(str(k), shown(v, content)) for k, v in dict(folded["state"]).items()]
    return StepRow(int(p.step or 0), str(p.type or ""), ", ".join(map(str, p.node_ids or [])),
                   e.ts, state)


class _Contexts:
    """Collects :class:`ContextRow` s from a page's events: a build's compactions and
    skills come before its ``completed`` / ``failed``; memory reads join the build of
    their step."""

    def __init__(self) -> None:
        self.rows: list[ContextRow] = []
        self._pending: dict[str, ContextRow] = {}
        self._reads: dict[int | None, list[str]] = {}

    def add(self, e: Event) -> None:
        p = e.body
        if isinstance(p, ev.ContextBuildStarted):
            self._pending[p.build_id] = ContextRow(e.seq, p.step, p.build_id, "started")
        elif isinstance(p, ev.ContextCompacted):
            self._row(e, p.build_id, p.step).compactions.append(
                f"{p.source}: {p.strategy} {p.items_before} -> {p.items_after} items, "
                f"{p.tokens_before} -> {p.tokens_after} tokens")
        elif isinstance(p, ev.SkillLoaded) and p.build_id is not None:
            self._row(e, p.build_id, None).skills.append(f"{p.skill_id}@{p.version or '-'}")
        elif isinstance(p, ev.MemoryReadCompleted):
            self._reads.setdefault(p.step, []).extend(
                f"{r['id']}@{r['revision']}" for r in p.records or ())
        elif isinstance(p, ev.ContextBuildCompleted | ev.ContextBuildFailed):
            self._end(e, p)

    def _row(self, e: Event, build_id: str, step: int | None) -> ContextRow:
        return self._pending.setdefault(build_id, ContextRow(e.seq, step, build_id, "started"))

    def _end(self, e: Event, p: ev.ContextBuildCompleted | ev.ContextBuildFailed) -> None:
        row = self._pending.pop(p.build_id, None) or ContextRow(e.seq, p.step, p.build_id, "")
        row.step = p.step if p.step is not None else row.step
        row.memory = self._reads.pop(row.step, [])
        if isinstance(p, ev.ContextBuildFailed):
            row.outcome, row.reason = "failed", p.reason
        else:
            row.outcome, row.tokens, row.items, row.dropped = (
                "completed", p.tokens, p.items, p.dropped)
            row.context_hash = p.context_hash
            row.sources = [(src, p.items_by_source.get(src, 0), tokens)
                           for src, tokens in p.tokens_by_source.items()]
        if len(self.rows) < CALLS_SHOWN:
            self.rows.append(row)


def _fold(run_id: str, prior: Iterable[tuple[str, Mapping[str, Any], float]]
          ) -> tuple[View, float | None]:
    """The view after ``prior``, and the time of its last event."""
    folded, ts = new_view(run_id), None
    for kind, data, ts in prior:
        apply_event(folded, kind, data, ts)
    return folded, ts


def run_page(view: View, prior: Iterable[tuple[str, Mapping[str, Any], float]],
             window: Sequence[Event], *, content: bool = False,
             letters: Iterable[Mapping[str, Any]] = ()) -> RunPage:
    """The page of a run whose projection row is ``view``: ``window`` is the page's
    events (at most :data:`TIMELINE_PAGE`, in ``seq`` order), ``prior`` the events
    before it as ``(kind, data, ts)`` (what the store's ``history`` gives: folded for
    the state the page's first decision saw). Every section shows what happened in the
    window: its timeline rows, its decisions with their state, its calls, its columns
    of the drawing; ``letters`` are the run's dead-letter records, linked from its
    facts. Pure."""
    folded, last_ts = _fold(view["run_id"], prior)
    timeline = list(rows(window))
    steps, calls, contexts = list[StepRow](), list[CallRow](), _Contexts()
    for r in timeline:
        e = r.event
        if e.type == "decision.policy.recorded" and len(steps) < STEPS_PAGE:
            steps.append(_step_row(e, folded, content))
        elif _is_call_end(e.type) and len(calls) < CALLS_SHOWN:
            calls.append(_call(e, r.duration, content))
        elif e.type.startswith(("context.", "skill.loaded", "memory.read.completed")):
            contexts.add(e)
        apply_event(folded, e.kind, e.data, e.ts)
    first = window[0].seq if window else 1
    last = int(view.get("seq", 0))
    more = bool(window) and window[-1].seq < last
    header = Header.of(view, letters)
    previous = None if last_ts is None else (first - 1, last_ts)
    return RunPage(header, header.created_at,
                   list(shown_rows(timeline, header.created_at, previous)), first,
                   window[-1].seq if more else None, steps, calls,
                   svg(diagram(window, from_start=first == 1)),
                   shown(view["input"], content),
                   shown(view["result"], content) if header.status == "completed" else None,
                   last, workflow_state=view["fsm"]["state"] if view["fsm"] else None,
                   case=view["fsm"].get("case") if view["fsm"] else None,
                   contexts=contexts.rows)


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
