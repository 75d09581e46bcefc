"""The re-execution engine: one pass over a run's recorded events (see the package doc)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from hypha_celery.errors import ReplayDivergence
from hypha_celery.events import Event, apply_event, new_view
from hypha_celery.events import payloads as ev
from hypha_celery.events.envelope import canonical
from hypha_celery.graph import Fail, FanOut, Finish, Graph, Next, NodeContext, Review
from hypha_celery.graph.calls import CallRecord, Calls
from hypha_celery.jsontypes import JsonValue
from hypha_celery.memory import MemoryScope
from hypha_celery.runtime.llmcontext import build_for_llm
from hypha_celery.runtime.memory import MemoryAccess, RunMemory
from hypha_celery.runtime.nodes import call_node, reduce
from hypha_celery.runtime.protocol import NodeOutcome, NodeResult, summary

#: Recorded failures that say what happened to the infrastructure, not what the code
#: returned: those executions are not re-run (a timeout, a fenced edge, a dead letter).
_NOT_CODE = frozenset({"NodeTimeout", "StaleEdge"})
#: The events of a recorded call (``<family>.call.<what>``).
_CALL_EVENTS = ("started", "completed", "failed")


@dataclass(frozen=True)
class Divergence:
    """Where new code first did something else: the recorded event's ``seq`` and
    ``step``, ``what`` (``decision``, ``input``, ``result``, ``node``, ``output``,
    ``call``), what the recording has and what the new code gave."""

    seq: int
    step: int | None
    what: str
    expected: Any
    actual: Any
    message: str


@dataclass(frozen=True)
class RerunReport:
    run_id: str
    graph_id: str
    decisions: int
    executions: int
    skipped: int
    divergence: Divergence | None

    @property
    def ok(self) -> bool:
        return self.divergence is None


class _Diverged(Exception):
    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.message)
        self.divergence = divergence


def rerun(graph: Graph, events: Sequence[Event], *,
          memory: MemoryAccess | None = None) -> RerunReport:
    """Re-execute the recorded run ``events`` with ``graph`` (its new code). ``memory``:
    where a node's recorded memory reads are read back (the recorded revisions, by id
    and revision); without it a node that recalls raises."""
    return _Rerun(graph, sorted(events, key=lambda e: e.seq), memory).run()


@dataclass
class _Scheduled:
    node_id: str
    input: JsonValue
    state: dict[str, object]  # the run state (View's)


class _Rerun:
    def __init__(self, graph: Graph, events: list[Event],
                 memory: MemoryAccess | None = None) -> None:
        self.graph = graph
        self.memory = memory
        self.events = events
        self.run_id = events[0].run_id if events else ""
        self.view = new_view(self.run_id)
        self.decision: Next | FanOut | Finish | Fail | Review | None = None
        self.scheduled: dict[str, _Scheduled] = {}
        self.calls = _recorded_calls(events)
        self.attempts = _final_attempts(events)
        self.edges: dict[str, list[Event]] = {}
        self.counts = {"decisions": 0, "executions": 0, "skipped": 0}

    def run(self) -> RerunReport:
        divergence = None
        try:
            for event in self.events:
                self._check(event)
                apply_event(self.view, event.type, event.payload, event.timestamp)
        except _Diverged as diverged:
            divergence = diverged.divergence
        return RerunReport(self.run_id, self.graph.id, divergence=divergence, **self.counts)

    def _diverge(self, event: Event, what: str, expected: Any, actual: Any,
                 message: str) -> _Diverged:
        step = int(event.step_id) if event.step_id and event.step_id.isdigit() else None
        return _Diverged(Divergence(event.seq, step, what, expected, actual, message))

    def _check(self, event: Event) -> None:
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event)

    # -- decisions ---------------------------------------------------------------------
    def _decided(self, event: Event) -> None:
        self.counts["decisions"] += 1
        expected = {k: v for k, v in event.payload.items() if k != "step"}
        try:
            decision = self.graph.decision_policy(self.graph.context(self.view))
        except Exception as exc:
            raise self._diverge(event, "decision", expected, type(exc).__name__,
                                f"the policy raised {type(exc).__name__}") from None
        if not isinstance(decision, Next | FanOut | Finish | Fail | Review):
            raise self._diverge(event, "decision", expected, type(decision).__name__,
                                "the policy returned no Next / FanOut / Finish / Fail / "
                                "Review")
        actual = summary(decision)
        if actual != expected:
            raise self._diverge(event, "decision", expected, actual,
                                f"step {event.body_as(ev.DecisionPolicyRecorded).step}: "
                                "the policy decided "
                                f"{actual} where the run decided {expected}")
        self.decision = decision

    def _scheduled_one(self, event: Event) -> None:
        p = event.body_as(ev.NodeExecutionScheduled)
        if isinstance(self.decision, Next):
            self._same_input(event, p.node_id, p.input, self.decision.input)
        self.scheduled[p.execution_id] = _Scheduled(p.node_id, p.input,
                                                    copy.deepcopy(self.view["state"]))

    def _scheduled_fanout(self, event: Event) -> None:
        new = self.decision.edges if isinstance(self.decision, FanOut) else None
        for i, edge in enumerate(event.body_as(ev.NodeFanoutScheduled).edges or []):
            if new is not None and i < len(new):
                self._same_input(event, edge["node_id"], edge.get("input"), new[i].input)
            self.scheduled[edge["execution_id"]] = _Scheduled(
                edge["node_id"], edge.get("input"), copy.deepcopy(self.view["state"]))

    def _same_input(self, event: Event, node_id: str, recorded: Any, new: Any) -> None:
        if canonical(recorded) != canonical(new):
            raise self._diverge(event, "input", recorded, new,
                                f"the input of {node_id!r} changed")

    def _completed(self, event: Event) -> None:
        recorded = event.body_as(ev.RunCompleted).result
        if isinstance(self.decision, Finish) and \
                canonical(self.decision.result) != canonical(recorded):
            raise self._diverge(event, "result", recorded, self.decision.result,
                                "the run's result changed")

    def _memory_of(self) -> RunMemory | None:
        user = self.view["user_id"]
        if self.memory is None or not user:
            return None
        return RunMemory(self.memory, MemoryScope(user, session_id=self.view["session_id"]),
                         self.run_id)

    # -- node executions ---------------------------------------------------------------
    def _node_outcome(self, event: Event) -> None:
        p = event.body
        assert isinstance(p, ev.NodeExecutionCompleted | ev.NodeExecutionFailed)
        if p.edge_of:
            self.edges.setdefault(p.edge_of, []).append(event)
        eid = p.execution_id
        sched = self.scheduled.get(eid)
        if sched is None or _not_code(p):
            self.counts["skipped"] += 1
            return
        node = self.graph.nodes.get(sched.node_id)
        if node is None:
            raise self._diverge(event, "node", sched.node_id, None,
                                f"node {sched.node_id!r} is not in the new graph")
        self.counts["executions"] += 1
        attempt = self.attempts.get(eid, 1)  # run as the attempt that counted
        calls = Calls(eid, sched.node_id, self.calls.get(eid, []), attempt)
        ctx = NodeContext(self.run_id, eid, sched.node_id, attempt, lambda: False, calls,
                          _memory=self._memory_of, _contexts=build_for_llm)
        try:
            actual = _result(call_node(node, copy.deepcopy(sched.state),
                                       copy.deepcopy(sched.input), ctx))
        except ReplayDivergence as exc:
            raise self._diverge(event, "call", None, exc.where, str(exc)) from None
        except Exception as exc:
            actual = ("error", type(exc).__name__)
        self._same_outcome(event, p, sched.node_id, actual)
        if calls.unused():
            raise self._diverge(event, "call", len(self.calls[eid]),
                                len(calls.records), f"{sched.node_id!r} made "
                                f"{calls.unused()} fewer model/tool calls than recorded")

    def _reducer_outcome(self, event: Event) -> None:
        p = event.body
        assert isinstance(p, ev.NodeReducerCompleted | ev.NodeReducerFailed)
        if p.reducer not in self.graph.reducers:
            raise self._diverge(event, "node", p.reducer, None,
                                f"reducer {p.reducer!r} is not in the new graph")
        if _not_code(p):
            self.counts["skipped"] += 1
            return
        self.counts["executions"] += 1
        edges = sorted(self.edges.get(p.execution_id, []), key=_edge_index)
        outcomes = [NodeOutcome.from_json(e.payload, self.run_id) for e in edges]
        try:
            actual = _result(reduce(self.graph, p.reducer, copy.deepcopy(self.view["state"]),
                                    outcomes))
        except Exception as exc:
            actual = ("error", type(exc).__name__)
        self._same_outcome(event, p, p.reducer, actual)

    def _same_outcome(self, event: Event, p: _Outcome, name: str,
                      actual: tuple[str, Any]) -> None:
        expected = ("ok", p.update) if p.error is None else ("error", p.error.get("type"))
        if canonical(list(expected)) != canonical(list(actual)):
            raise self._diverge(event, "output", list(expected), list(actual),
                                f"{name!r} returned something else")


_HANDLERS = {
    "decision.policy.recorded": _Rerun._decided,
    "node.execution.scheduled": _Rerun._scheduled_one,
    "node.fanout.scheduled": _Rerun._scheduled_fanout,
    "run.completed": _Rerun._completed,
    "node.execution.completed": _Rerun._node_outcome,
    "node.execution.failed": _Rerun._node_outcome,
    "node.reducer.completed": _Rerun._reducer_outcome,
    "node.reducer.failed": _Rerun._reducer_outcome,
}


_NodeOutcome = ev.NodeExecutionCompleted | ev.NodeExecutionFailed
_Outcome = _NodeOutcome | ev.NodeReducerCompleted | ev.NodeReducerFailed
_ModelCall = ev.ModelCallStarted | ev.ModelCallCompleted | ev.ModelCallFailed
_ToolCall = ev.ToolCallStarted | ev.ToolCallCompleted | ev.ToolCallFailed


def _edge_index(event: Event) -> int:
    body = event.body
    assert isinstance(body, _NodeOutcome)
    return body.index or 0


def _not_code(p: _Outcome) -> bool:
    """A recorded failure of the infrastructure (a timeout, a fenced edge, a dead
    letter), not of the code."""
    err = p.error or {}
    dead = p.dead_letter_id if isinstance(p, _NodeOutcome) else None
    return bool(err.get("type") in _NOT_CODE or err.get("by") or dead)


def _result(result: NodeResult) -> tuple[str, Any]:
    """What the runtime would record for ``result``, as (ok|error, ...)."""
    if result.error is None:
        return ("ok", result.update)
    return ("error", result.error.get("type"))


def _final_attempts(events: Sequence[Event]) -> dict[str, int]:
    """Per execution, the attempt number of its last ``node.execution.started``."""
    started = (e.body_as(ev.NodeExecutionStarted) for e in events
               if e.type == "node.execution.started")
    return {p.execution_id: int(p.attempt or 1) for p in started}


def _recorded_calls(events: Sequence[Event]) -> dict[str, list[CallRecord]]:
    """Per execution, the recorded model / tool / memory calls of its final attempt in
    call order."""
    calls: dict[str, dict[str, CallRecord]] = {}
    for e in events:
        if e.type in _MEMORY_CALL_EVENTS:
            _memory_record(calls, e)
            continue
        family, _, what = e.type.partition(".call.")
        if family not in ("model", "tool") or what not in _CALL_EVENTS:
            continue  # a governed tool's facts (tool.call.requested ...) are not calls
        p = e.body
        assert isinstance(p, _ModelCall | _ToolCall)
        call_id = str(p.call_id)
        by_id = calls.setdefault(str(p.execution_id), {})
        rec = by_id.get(call_id)
        if rec is None:
            rec = by_id[call_id] = _record(p, call_id)
        if isinstance(p, ev.ModelCallStarted | ev.ToolCallStarted):
            if p.request_hash is not None:
                rec["request_hash"] = p.request_hash
        elif isinstance(p, ev.ModelCallCompleted | ev.ToolCallCompleted):
            rec["output"] = p.output
        else:
            rec["error"] = p.error or {}
    return {eid: _final_attempt(list(by_id.values())) for eid, by_id in calls.items()}


#: A node's memory calls (``ctx.recall`` / ``ctx.remember``), as their events say.
_MEMORY_CALL_EVENTS = frozenset({
    "memory.read.requested", "memory.read.completed", "memory.read.failed",
    "memory.write.requested", "memory.write.committed", "memory.write.rejected"})


def _memory_record(calls: dict[str, dict[str, CallRecord]], e: Event) -> None:
    p = e.body
    assert isinstance(p, ev.MemoryReadRequested | ev.MemoryReadCompleted | ev.MemoryReadFailed
                      | ev.MemoryWriteRequested | ev.MemoryWriteCommitted
                      | ev.MemoryWriteRejected)
    if p.execution_id is None or p.operation_id is None:
        return  # not a node's call (an agent's or the application's own)
    read = e.type.startswith("memory.read.")
    rec = calls.setdefault(p.execution_id, {}).setdefault(p.operation_id, {
        "call_id": p.operation_id, "family": "memory", "attempt": p.attempt or 1,
        "name": "memory.search" if read else "memory.write"})
    if isinstance(p, ev.MemoryReadRequested):
        rec["request_hash"] = p.query_hash
    elif isinstance(p, ev.MemoryWriteRequested):
        if p.request_hash is not None:
            rec["request_hash"] = p.request_hash
    elif isinstance(p, ev.MemoryReadCompleted):
        rec["output"] = cast(JsonValue, list(p.records or []))
    elif isinstance(p, ev.MemoryWriteCommitted):
        rec["output"] = {"id": p.record_id, "revision": p.revision, "reused": p.reused}
    else:
        rec["error"] = {"type": p.error, "message": p.reason}


def _record(p: _ModelCall | _ToolCall, call_id: str) -> CallRecord:
    """A call's record from its first event: id, family, name, attempt."""
    rec: CallRecord
    if isinstance(p, _ModelCall):
        rec, name = {"call_id": call_id, "family": "model", "attempt": p.attempt}, p.model
    else:
        rec, name = {"call_id": call_id, "family": "tool", "attempt": p.attempt}, p.tool
    if name is not None:
        rec["name"] = name
    return rec


def _final_attempt(records: list[CallRecord]) -> list[CallRecord]:
    """The calls of the attempt whose outcome the run used (the last one), in call order;
    a retried attempt's calls are in the log but were not what the decision saw."""
    last = max(r.get("attempt", 1) for r in records)
    return sorted((r for r in records if r.get("attempt", 1) == last),
                  key=lambda r: _index(r.get("call_id", "")))


def _index(call_id: str) -> int:
    tail = call_id.rsplit(":", 1)[-1]
    return int(tail[1:]) if tail[1:].isdigit() else 0
