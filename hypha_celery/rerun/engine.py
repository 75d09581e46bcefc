"""The re-execution engine: one pass over a run's recorded events (see the package doc)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from hypha_celery.errors import ReplayDivergence
from hypha_celery.events import Event, apply_event, new_view
from hypha_celery.events.envelope import canonical
from hypha_celery.graph import Fail, FanOut, Finish, Graph, Next, NodeContext, Review
from hypha_celery.graph.calls import CallRecord, Calls
from hypha_celery.jsontypes import JsonValue, json_object
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


def rerun(graph: Graph, events: Sequence[Event]) -> RerunReport:
    """Re-execute the recorded run ``events`` with ``graph`` (its new code)."""
    return _Rerun(graph, sorted(events, key=lambda e: e.seq)).run()


@dataclass
class _Scheduled:
    node_id: str
    input: JsonValue
    state: dict[str, object]  # the run state (View's)


class _Rerun:
    def __init__(self, graph: Graph, events: list[Event]) -> None:
        self.graph = graph
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
                                f"step {event.payload.get('step')}: the policy decided "
                                f"{actual} where the run decided {expected}")
        self.decision = decision

    def _scheduled_one(self, event: Event) -> None:
        p = event.payload
        if isinstance(self.decision, Next):
            self._same_input(event, p["node_id"], p.get("input"), self.decision.input)
        self.scheduled[p["execution_id"]] = _Scheduled(p["node_id"], p.get("input"),
                                                       copy.deepcopy(self.view["state"]))

    def _scheduled_fanout(self, event: Event) -> None:
        new = self.decision.edges if isinstance(self.decision, FanOut) else None
        for i, edge in enumerate(event.payload.get("edges") or []):
            if new is not None and i < len(new):
                self._same_input(event, edge["node_id"], edge.get("input"), new[i].input)
            self.scheduled[edge["execution_id"]] = _Scheduled(
                edge["node_id"], edge.get("input"), copy.deepcopy(self.view["state"]))

    def _same_input(self, event: Event, node_id: str, recorded: Any, new: Any) -> None:
        if canonical(recorded) != canonical(new):
            raise self._diverge(event, "input", recorded, new,
                                f"the input of {node_id!r} changed")

    def _completed(self, event: Event) -> None:
        if isinstance(self.decision, Finish) and \
                canonical(self.decision.result) != canonical(event.payload.get("result")):
            raise self._diverge(event, "result", event.payload.get("result"),
                                self.decision.result, "the run's result changed")

    # -- node executions ---------------------------------------------------------------
    def _node_outcome(self, event: Event) -> None:
        p = event.payload
        if p.get("edge_of"):
            self.edges.setdefault(p["edge_of"], []).append(event)
        sched = self.scheduled.get(p.get("execution_id", ""))
        if sched is None or _not_code(p):
            self.counts["skipped"] += 1
            return
        node = self.graph.nodes.get(sched.node_id)
        if node is None:
            raise self._diverge(event, "node", sched.node_id, None,
                                f"node {sched.node_id!r} is not in the new graph")
        self.counts["executions"] += 1
        attempt = self.attempts.get(p["execution_id"], 1)  # run as the attempt that counted
        calls = Calls(p["execution_id"], sched.node_id, self.calls.get(p["execution_id"], []),
                      attempt)
        ctx = NodeContext(self.run_id, p["execution_id"], sched.node_id, attempt, lambda: False,
                          calls)
        try:
            actual = _result(call_node(node, copy.deepcopy(sched.state),
                                       copy.deepcopy(sched.input), ctx))
        except ReplayDivergence as exc:
            raise self._diverge(event, "call", None, exc.where, str(exc)) from None
        except Exception as exc:
            actual = ("error", type(exc).__name__)
        self._same_outcome(event, sched.node_id, actual)
        if calls.unused():
            raise self._diverge(event, "call", len(self.calls[p["execution_id"]]),
                                len(calls.records), f"{sched.node_id!r} made "
                                f"{calls.unused()} fewer model/tool calls than recorded")

    def _reducer_outcome(self, event: Event) -> None:
        p = event.payload
        if p.get("reducer", "") not in self.graph.reducers:
            raise self._diverge(event, "node", p.get("reducer"), None,
                                f"reducer {p.get('reducer')!r} is not in the new graph")
        if _not_code(p):
            self.counts["skipped"] += 1
            return
        self.counts["executions"] += 1
        edges = sorted(self.edges.get(p["execution_id"], []), key=lambda e: e.payload["index"])
        outcomes = [NodeOutcome.from_json(e.payload, self.run_id) for e in edges]
        try:
            actual = _result(reduce(self.graph, p["reducer"], copy.deepcopy(self.view["state"]),
                                    outcomes))
        except Exception as exc:
            actual = ("error", type(exc).__name__)
        self._same_outcome(event, str(p["reducer"]), actual)

    def _same_outcome(self, event: Event, name: str, actual: tuple[str, Any]) -> None:
        p = event.payload
        expected = ("ok", p["update"]) if "update" in p else \
            ("error", (p.get("error") or {}).get("type"))
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


def _not_code(payload: Mapping[str, object]) -> bool:
    err = json_object(payload.get("error"))
    return bool(err.get("type") in _NOT_CODE or err.get("by") or payload.get("dead_letter_id"))


def _result(result: NodeResult) -> tuple[str, Any]:
    """What the runtime would record for ``result``, as (ok|error, ...)."""
    if result.error is None:
        return ("ok", result.update)
    return ("error", result.error.get("type"))


def _final_attempts(events: Sequence[Event]) -> dict[str, int]:
    """Per execution, the attempt number of its last ``node.execution.started``."""
    return {e.payload["execution_id"]: int(e.payload.get("attempt") or 1)
            for e in events if e.type == "node.execution.started"}


def _recorded_calls(events: Sequence[Event]) -> dict[str, list[CallRecord]]:
    """Per execution, the recorded model / tool calls of its final attempt in call order."""
    calls: dict[str, dict[str, dict[str, object]]] = {}  # the stored events' fields
    for e in events:
        family, _, what = e.type.partition(".call.")
        if family not in ("model", "tool") or what not in _CALL_EVENTS:
            continue  # a governed tool's facts (tool.call.requested ...) are not calls
        p = e.payload
        rec = calls.setdefault(p["execution_id"], {}).setdefault(
            p["call_id"], {"call_id": p["call_id"], "family": family, "name": p.get(family),
                           "attempt": p.get("attempt", 1)})
        if what == "started":
            rec["request_hash"] = p.get("request_hash")
        elif what == "completed":
            rec["output"] = p.get("output")
        elif what == "failed":
            rec["error"] = p.get("error") or {}
    return {eid: _final_attempt(cast(list[CallRecord], list(by_id.values())))
            for eid, by_id in calls.items()}


def _final_attempt(records: list[CallRecord]) -> list[CallRecord]:
    """The calls of the attempt whose outcome the run used (the last one), in call order;
    a retried attempt's calls are in the log but were not what the decision saw."""
    last = max(r.get("attempt", 1) for r in records)
    return sorted((r for r in records if r.get("attempt", 1) == last),
                  key=lambda r: _index(r.get("call_id", "")))


def _index(call_id: str) -> int:
    tail = call_id.rsplit(":", 1)[-1]
    return int(tail[1:]) if tail[1:].isdigit() else 0
