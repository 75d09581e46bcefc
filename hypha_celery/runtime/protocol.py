"""The runtime's messages, typed: what a node task receives (:class:`NodeMessage`), what
a node or edge execution produces (:class:`NodeOutcome`), what an edge hands the chord
join (:class:`EdgeRef`), what the reducer task receives (:class:`FanoutMeta`) and
produces (:class:`ReducerOutcome`), and what the coordinator is given (:data:`Payload`:
one of those outcomes or a :class:`Kickoff`).

Each is a frozen slotted dataclass whose ``to_json`` writes exactly the JSON the runtime
wrote before they were typed (Celery task arguments and results, ``hypha_outcomes.data``;
the key order too) and whose ``from_json`` reads it back — only there are keys tested for
presence. ``kind`` tells the shapes apart where one message may be several: a node or an
edge outcome, a kickoff or an outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, TypedDict

from hypha_celery.events.payloads import DecisionType
from hypha_celery.events.view import ErrorJson
from hypha_celery.graph import Decision, ErrorInfo, Fail, FanOut, Next, Outcome, Review

__all__ = ["FATAL_ERRORS", "CallJson", "DeadLetterJson", "EdgeRef", "ErrorJson", "FanoutMeta",
           "Kickoff", "NodeMessage", "NodeOutcome", "NodeResult", "Payload", "ReducerOutcome",
           "DecisionSummary", "StartedJson", "parse_payload", "summary"]



class StartedJson(TypedDict):
    """``node.execution.started`` of an attempt, carried by its outcome (``at``: its time)."""

    execution_id: str
    node_id: str
    attempt: int
    worker: str
    at: float


#: One model or tool call a node made through its context
#: (:class:`~hypha_celery.graph.calls.Calls`), as its outcome carries it.
class CallJson(TypedDict, total=False):
    call_id: str
    family: str
    name: str
    attempt: int
    request_hash: str
    side_effect: str
    started_at: float
    ended_at: float
    output: object
    error: ErrorJson
    # a ``ctx.llm`` call's measures (see :mod:`hypha_celery.graph.llmcall`)
    provider: str
    request_bytes: int
    usage: dict[str, int]
    latency_ms: float
    wait_ms: float
    cost_usd: float
    # a failed model call's BackendError kind (None: another exception)
    error_kind: str | None


class DeadLetterJson(TypedDict):
    """The dead-letter record an outcome carries for the coordinator to write."""

    task: str
    queue: str | None
    args: list[Any]
    reason: str
    error_class: str
    attempts: int


#: Error types that end the run whatever ``on_node_error`` says (non-JSON output).
FATAL_ERRORS = frozenset({"InvalidState", "InvalidNodeOutput"})


@dataclass(frozen=True, slots=True)
class NodeResult:
    """What a node's or a reducer's call gave: the ``update`` to apply, or an ``error``."""

    update: dict[str, object] | None = None
    error: ErrorJson | None = None


@dataclass(frozen=True, slots=True)
class NodeMessage:
    """The argument of a node task: one execution of ``node_id`` (an edge of the
    fan-out ``edge_of`` at ``index``), with ``attempt`` set from the second one on."""

    run_id: str
    execution_id: str
    node_id: str
    input: Any = None
    edge_of: str | None = None
    index: int | None = None
    attempt: int | None = None

    @property
    def kind(self) -> Literal["node", "edge"]:
        return "node" if self.edge_of is None else "edge"

    @property
    def awaited(self) -> str:
        """The execution id the run awaits for this message (an edge: its fan-out)."""
        return self.execution_id if self.edge_of is None else self.edge_of

    def to_json(self) -> dict[str, object]:
        if self.edge_of is None:
            out = {"run_id": self.run_id, "execution_id": self.execution_id,
                   "node_id": self.node_id, "input": self.input}
        else:
            out = {"run_id": self.run_id, "edge_of": self.edge_of, "index": self.index,
                   "execution_id": self.execution_id, "node_id": self.node_id,
                   "input": self.input}
        if self.attempt is not None:
            out["attempt"] = self.attempt
        return out

    def args_json(self) -> dict[str, object]:
        """The message as a dead letter records it (to publish it again)."""
        out = {"run_id": self.run_id, "execution_id": self.execution_id,
               "node_id": self.node_id, "input": self.input}
        if self.edge_of is not None:
            out.update(edge_of=self.edge_of, index=self.index)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeMessage:
        """Read a message :func:`~hypha_celery.runtime.failures.envelope_problem` passed."""
        return cls(data["run_id"], data["execution_id"], data["node_id"], data.get("input"),
                   data.get("edge_of"), data.get("index"), data.get("attempt"))

    def with_attempt(self, attempt: int) -> NodeMessage:
        return replace(self, attempt=attempt)


@dataclass(frozen=True, slots=True)
class NodeOutcome:
    """What one node or edge execution did: ``update`` (ok) or ``error``, its
    ``duration``, the model and tool ``calls`` and ``facts`` it recorded, its ``started``
    record (idempotent nodes), ``late`` (it ran past its timeout), a ``dead_letter``
    record, and ``settled`` (read back from the store: first writer won)."""

    run_id: str
    execution_id: str
    node_id: str
    update: dict[str, object] | None = None
    error: ErrorJson | None = None
    duration: float = 0.0
    edge_of: str | None = None
    index: int | None = None
    late: bool = False
    calls: list[CallJson] | None = None
    facts: list[list[Any]] | None = None
    started: StartedJson | None = None
    dead_letter: DeadLetterJson | None = None
    settled: bool = False

    @property
    def kind(self) -> Literal["node", "edge"]:
        return "node" if self.edge_of is None else "edge"

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def fatal(self) -> bool:
        """Non-JSON output: it ends the run (``invalid_state``), a node's or an edge's."""
        return self.error is not None and self.error.get("type") in FATAL_ERRORS

    def to_json(self) -> dict[str, object]:
        """The outcome envelope (a node task's result, the coordinator's argument)."""
        return {"run_id": self.run_id, **self.stored_json()}

    def stored_json(self) -> dict[str, object]:
        """The outcome as ``hypha_outcomes.data`` holds it (no ``run_id``)."""
        out: dict[str, object] = {"execution_id": self.execution_id, "node_id": self.node_id}
        if self.edge_of is not None:
            out["edge_of"] = self.edge_of
            out["index"] = self.index
        if self.dead_letter is not None:
            out["error"] = self.error
            out["duration"] = self.duration
            if self.started:
                out["started"] = self.started
            if self.calls:
                out["calls"] = self.calls
            out["dead_letter"] = self.dead_letter
        else:
            self._result_json(out)
        if self.settled:
            out["settled"] = True
        return out

    def _result_json(self, out: dict[str, object]) -> None:
        if self.late:
            out["duration"] = self.duration
            out["late"] = True
            out["error"] = self.error
        else:
            if self.error is None:
                out["update"] = self.update
            else:
                out["error"] = self.error
            out["duration"] = self.duration
        if self.calls:
            out["calls"] = self.calls
        if self.facts:
            out["facts"] = self.facts
        if self.started:
            out["started"] = self.started

    def event_data(self, dead_letter_id: int | None = None) -> dict[str, object]:
        """The data of its ``node.execution.completed`` / ``failed`` event."""
        if self.edge_of is not None:
            data = {k: v for k, v in self.stored_json().items() if k not in _NOT_EVENT_DATA}
        else:
            data = {"execution_id": self.execution_id, "node_id": self.node_id,
                    "duration": self.duration}
            if self.error is None:
                data["update"] = self.update
            else:
                data["error"] = self.error
        if dead_letter_id is not None:
            data["dead_letter_id"] = dead_letter_id
        return data

    def outcome(self) -> Outcome:
        """The :class:`~hypha_celery.graph.Outcome` a reducer (or a re-execution) sees."""
        err = self.error
        return Outcome(node_id=self.node_id, ok=err is None, value=self.update,
                       error=ErrorInfo.from_json(err) if err else None,
                       execution_id=self.execution_id)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], run_id: str | None = None) -> NodeOutcome:
        """Read an envelope, or a stored outcome (``run_id`` given: the row has none)."""
        return cls(
            run_id=data["run_id"] if run_id is None else run_id,
            execution_id=data["execution_id"], node_id=data["node_id"],
            update=data.get("update"), error=data.get("error"),
            duration=data.get("duration") or 0.0,
            edge_of=data.get("edge_of"), index=data.get("index"),
            late=bool(data.get("late")), calls=data.get("calls"), facts=data.get("facts"),
            started=data.get("started"), dead_letter=data.get("dead_letter"),
            settled=bool(data.get("settled")))


#: Envelope keys that an edge's outcome event leaves out.
_NOT_EVENT_DATA = frozenset({"started", "late", "run_id", "settled", "dead_letter", "calls",
                             "facts"})


@dataclass(frozen=True, slots=True)
class EdgeRef:
    """What an edge hands the chord join: a reference, never the node's output.
    ``stale``: the run no longer awaited the edge."""

    execution_id: str
    index: int
    stale: bool = False

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"execution_id": self.execution_id, "index": self.index}
        if self.stale:
            out["stale"] = True
        return out

    @classmethod
    def from_json(cls, item: Any) -> EdgeRef | None:
        """A chord result as a reference (None: not one, e.g. an edge task's error)."""
        if not isinstance(item, dict) or "index" not in item:
            return None
        return cls(str(item.get("execution_id")), int(item["index"]), bool(item.get("stale")))


@dataclass(frozen=True, slots=True)
class FanoutMeta:
    """The reducer task's own argument: the fan-out, its reducer, how many edges."""

    run_id: str
    execution_id: str
    reducer: str
    width: int

    def to_json(self) -> dict[str, object]:
        return {"run_id": self.run_id, "execution_id": self.execution_id,
                "reducer": self.reducer, "width": self.width}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FanoutMeta:
        return cls(data["run_id"], data["execution_id"], data["reducer"], int(data["width"]))


@dataclass(frozen=True, slots=True)
class ReducerOutcome:
    """What a reducer did with its fan-out's ``edges`` (their stored outcomes, in
    declaration order): ``update`` or ``error``; ``stale``: the run stopped awaiting
    the fan-out (not every edge ran), and the reducer was not called."""

    run_id: str
    execution_id: str
    reducer: str
    edges: tuple[NodeOutcome, ...] = ()
    update: dict[str, object] | None = None
    error: ErrorJson | None = None
    duration: float = 0.0
    stale: bool = False

    kind: ClassVar[Literal["reducer"]] = "reducer"

    @property
    def node_id(self) -> str:
        return self.reducer

    @property
    def ok(self) -> bool:
        return not self.stale and self.error is None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"run_id": self.run_id, "execution_id": self.execution_id,
                               "reducer": self.reducer,
                               "edges": [e.stored_json() for e in self.edges]}
        if self.stale:
            out["stale"] = True
            return out
        if self.error is None:
            out["update"] = self.update
        else:
            out["error"] = self.error
        out["duration"] = self.duration
        return out

    def event_data(self) -> dict[str, object]:
        """The data of its ``node.reducer.completed`` / ``failed`` event."""
        data: dict[str, object] = {"execution_id": self.execution_id, "reducer": self.reducer,
                                "duration": None if self.stale else self.duration}
        if self.stale:
            data["error"] = {"type": "StaleEdge", "message": "an edge result was not awaited"}
        elif self.error is not None:
            data["error"] = self.error
        else:
            data["update"] = self.update
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReducerOutcome:
        run_id = data["run_id"]
        return cls(run_id, data["execution_id"], data["reducer"],
                   tuple(NodeOutcome.from_json(e, run_id) for e in data.get("edges") or ()),
                   data.get("update"), data.get("error"), data.get("duration") or 0.0,
                   bool(data.get("stale")))


@dataclass(frozen=True, slots=True)
class Kickoff:
    """A coordinator message that carries no outcome: a run's first step (its kickoff
    id), or the step after a human review (the review id)."""

    run_id: str
    execution_id: str

    kind: ClassVar[Literal["kickoff"]] = "kickoff"

    def to_json(self) -> dict[str, object]:
        return {"run_id": self.run_id, "execution_id": self.execution_id}


#: What the coordinator is given.
Payload = Kickoff | NodeOutcome | ReducerOutcome


def parse_payload(data: Mapping[str, Any]) -> Payload:
    """A coordinator message as the previous version wrote it (a dict with ``run_id``
    and ``execution_id``): a reducer's outcome has ``edges``, a node's ``node_id``."""
    if "edges" in data:
        return ReducerOutcome.from_json(data)
    if "node_id" in data:
        return NodeOutcome.from_json(data)
    return Kickoff(data["run_id"], data["execution_id"])


class DecisionSummary(TypedDict, total=False):
    """The data of ``decision.policy.recorded`` (with its ``step``)."""

    type: DecisionType
    node_ids: list[str]
    reducer: str
    reason: str


def summary(decision: Decision) -> DecisionSummary:
    """What a decision was, as its event records it."""
    if isinstance(decision, Next):
        return {"type": "next", "node_ids": [decision.node_id]}
    if isinstance(decision, FanOut):
        return {"type": "fanout", "reducer": decision.reducer,
                "node_ids": [e.node_id for e in decision.edges]}
    if isinstance(decision, Fail):
        return {"type": "fail", "reason": decision.reason}
    if isinstance(decision, Review):
        return {"type": "review", "reason": decision.reason}
    return {"type": "finish"}
