"""The runtime's messages, typed: what a node task receives (:class:`NodeMessage`), what
a node or edge execution produces (:class:`NodeOutcome`), what an edge hands the chord
join (:class:`EdgeRef`), what the reducer task receives (:class:`FanoutMeta`) and
produces (:class:`ReducerOutcome`), and what the coordinator is given (:data:`Payload`:
one of those outcomes or a :class:`Kickoff`).

Each is a frozen slotted dataclass read by a cached ``pydantic.TypeAdapter`` (its
``from_json``: the fields checked, a ``ValidationError`` for a message of another shape;
the records the runtime built itself -- errors, calls, facts, a start, a dead letter --
passed through as written) and written as exactly the JSON the runtime wrote before
they were typed (Celery task arguments and results, ``hypha_outcomes.data``; the key
order too). :class:`EdgeRef`, :class:`FanoutMeta` and :class:`Kickoff` are written by
their adapter; the node path's three (:class:`NodeMessage`, :class:`NodeOutcome`,
:class:`ReducerOutcome`) keep their hand-written ``to_json``: a key is written or not
by what the outcome is (an ``update`` or an ``error``, late, dead-lettered), which no
field's own rule says, and pydantic's serializer costs 1-3 µs more per message
(docs/architecture.md, "Serialization"). ``kind`` tells the shapes apart where one
message may be several: a node or an edge outcome, a kickoff or an outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    SkipValidation,
    Tag,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)
from typing_extensions import TypedDict  # pydantic reads it (python < 3.12)

from hypha_celery.events import payloads as ev
from hypha_celery.events.payloads import DecisionType
from hypha_celery.events.view import AwaitingJson, ErrorJson
from hypha_celery.graph import Decision, ErrorInfo, Fail, FanOut, Next, Outcome, Review
from hypha_celery.graph.calls import CallRecord

__all__ = ["EFFECT_OUTCOME_UNKNOWN", "FATAL_ERRORS", "DeadLetterJson", "DecisionSummary",
           "EdgeRef", "ErrorJson", "FanoutMeta", "Kickoff", "NodeMessage", "NodeOutcome",
           "NodeResult", "Payload", "ReducerOutcome", "StartedJson", "awaiting", "effect_unknown",
           "parse_payload", "summary"]


class StartedJson(TypedDict):
    """``node.execution.started`` of an attempt, carried by its outcome (``at``: its time)."""

    execution_id: str
    node_id: str
    attempt: int
    worker: str
    at: float


class DeadLetterJson(TypedDict):
    """The dead-letter record an outcome carries for the coordinator to write."""

    task: str
    queue: str | None
    args: list[Any]
    reason: str
    error_class: str
    attempts: int


def _zero(value: object) -> object:
    return 0.0 if value is None else value


#: A duration; null (or absent) reads as 0.0, as the hand-written readers had it.
Duration = Annotated[float, BeforeValidator(_zero)]
#: ``late`` / ``settled`` / ``stale``: written only when true; null reads as false.
Flag = Annotated[bool, BeforeValidator(bool)]
#: A record the runtime built itself (its writer typed it): carried as written.
Error = Annotated[ErrorJson | None, SkipValidation]


#: Error types that end the run whatever ``on_node_error`` says (non-JSON output).
FATAL_ERRORS = frozenset({"InvalidState", "InvalidNodeOutput"})

#: The ``run.quarantined`` reason of a node whose error says its effect may have happened.
EFFECT_OUTCOME_UNKNOWN = "effect_outcome_unknown"


def awaiting(error: ErrorJson | None) -> AwaitingJson | None:
    """What a node that parked its run waits for (its error's ``awaiting``: it raised
    :class:`~hypha_celery.errors.AwaitingMessage`), or None."""
    return None if error is None else error.get("awaiting")


def effect_unknown(error: Mapping[str, object] | None) -> bool:
    """Whether a node's error says an effect may or may not have happened (``"effect":
    "unknown"``: the node raised an :class:`~hypha_celery.errors.EffectOutcomeUnknown`)."""
    return error is not None and error.get("effect") == "unknown"


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
    input: Any = None  # user data
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
    def from_json(cls, data: Mapping[str, object]) -> NodeMessage:
        """Read a message :func:`~hypha_celery.runtime.failures.envelope_problem` passed."""
        return _MESSAGE.validate_python(data)

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
    error: Error = None
    duration: Duration = 0.0
    edge_of: str | None = None
    index: int | None = None
    late: Flag = False
    calls: Annotated[list[CallRecord] | None, SkipValidation] = None
    facts: Annotated[list[list[Any]] | None, SkipValidation] = None  # [kind, data, calls]
    started: Annotated[StartedJson | None, SkipValidation] = None
    dead_letter: Annotated[DeadLetterJson | None, SkipValidation] = None
    settled: Flag = False

    @property
    def kind(self) -> Literal["node", "edge"]:
        return "node" if self.edge_of is None else "edge"

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def effect_unknown(self) -> bool:
        """Its error says an effect may or may not have happened (:func:`effect_unknown`):
        the coordinator quarantines the run instead of applying it."""
        return effect_unknown(self.error)

    @property
    def awaiting(self) -> AwaitingJson | None:
        """What the node parked the run for (:func:`awaiting`): the coordinator records
        ``run.suspended`` instead of applying it."""
        return awaiting(self.error)

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

    def event(self, dead_letter_id: int | None = None
              ) -> ev.NodeExecutionCompleted | ev.NodeExecutionFailed:
        """Its ``node.execution.completed`` / ``failed`` event: the ids, an edge's fan-out
        and index, the ``update`` or the ``error``, the duration, the dead letter's id."""
        ids: _OutcomeIds = {}
        if self.edge_of is not None:
            ids["edge_of"], ids["index"] = self.edge_of, self.index
        if dead_letter_id is not None:
            ids["dead_letter_id"] = dead_letter_id
        if self.error is None:
            return _completed(execution_id=self.execution_id, node_id=self.node_id,
                              update=self.update, duration=self.duration, **ids)
        return _failed(execution_id=self.execution_id, node_id=self.node_id, error=self.error,
                       duration=self.duration, **ids)

    def outcome(self) -> Outcome:
        """The :class:`~hypha_celery.graph.Outcome` a reducer (or a re-execution) sees."""
        err = self.error
        return Outcome(node_id=self.node_id, ok=err is None, value=self.update,
                       error=ErrorInfo.from_json(err) if err else None,
                       execution_id=self.execution_id)

    @classmethod
    def from_json(cls, data: Mapping[str, object], run_id: str | None = None) -> NodeOutcome:
        """Read an envelope, or a stored outcome (``run_id`` given: the row has none)."""
        return _OUTCOME.validate_python(data if run_id is None else {**data, "run_id": run_id})


class _OutcomeIds(TypedDict, total=False):
    """What an outcome's event says besides its ids when it is an edge's or dead-lettered."""

    edge_of: str
    index: int | None
    dead_letter_id: int


# Its events, built unvalidated (the node path's: see payloads.trusted).
_completed = ev.trusted(ev.NodeExecutionCompleted)
_failed = ev.trusted(ev.NodeExecutionFailed)


@dataclass(frozen=True, slots=True)
class EdgeRef:
    """What an edge hands the chord join: a reference, never the node's output.
    ``stale``: the run no longer awaited the edge."""

    execution_id: str
    index: int
    stale: Flag = False

    def to_json(self) -> dict[str, object]:
        """``stale`` written only when true."""
        json: dict[str, object] = _EDGE_REF.dump_python(self, exclude_defaults=True)
        return json

    @classmethod
    def from_json(cls, item: object) -> EdgeRef | None:
        """A chord result as a reference (None: not one, e.g. an edge task's error)."""
        if not isinstance(item, dict) or "index" not in item:
            return None
        return _EDGE_REF.validate_python(item)


@dataclass(frozen=True, slots=True)
class FanoutMeta:
    """The reducer task's own argument: the fan-out, its reducer, how many edges."""

    run_id: str
    execution_id: str
    reducer: str
    width: int

    def to_json(self) -> dict[str, object]:
        json: dict[str, object] = _META.dump_python(self)
        return json

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> FanoutMeta:
        return _META.validate_python(data)


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
    error: Error = None
    duration: Duration = 0.0
    stale: Flag = False

    kind: ClassVar[Literal["reducer"]] = "reducer"

    @field_validator("edges", mode="before")
    @classmethod
    def _of_this_run(cls, edges: object, info: ValidationInfo) -> object:
        """The edges as ``hypha_outcomes`` holds them (no ``run_id``): this run's."""
        if not isinstance(edges, list | tuple):
            return () if edges is None else edges
        run_id = info.data.get("run_id")
        return [{**e, "run_id": run_id} if isinstance(e, dict) else e for e in edges]

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

    def event(self) -> ev.NodeReducerCompleted | ev.NodeReducerFailed:
        """Its ``node.reducer.completed`` / ``failed`` event (stale: failed, no duration)."""
        eid, reducer = self.execution_id, self.reducer
        if self.stale:
            return _reducer_failed(execution_id=eid, reducer=reducer, duration=None,
                                   error=_STALE)
        if self.error is not None:
            return _reducer_failed(execution_id=eid, reducer=reducer, duration=self.duration,
                                   error=self.error)
        return _reducer_completed(execution_id=eid, reducer=reducer, duration=self.duration,
                                  update=self.update)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ReducerOutcome:
        return _REDUCED.validate_python(data)


_reducer_completed = ev.trusted(ev.NodeReducerCompleted)
_reducer_failed = ev.trusted(ev.NodeReducerFailed)
#: A stale fan-out's reducer error.
_STALE: ErrorJson = {"type": "StaleEdge", "message": "an edge result was not awaited"}


@dataclass(frozen=True, slots=True)
class Kickoff:
    """A coordinator message that carries no outcome: a run's first step (its kickoff
    id), or the step after a human review (the review id)."""

    run_id: str
    execution_id: str

    kind: ClassVar[Literal["kickoff"]] = "kickoff"

    def to_json(self) -> dict[str, object]:
        json: dict[str, object] = _KICKOFF.dump_python(self)
        return json


#: What the coordinator is given.
Payload = Kickoff | NodeOutcome | ReducerOutcome


def _shape(data: object) -> str | None:
    """A reducer's outcome has ``edges``, a node's ``node_id``; else a kickoff."""
    if isinstance(data, Mapping):
        return "reducer" if "edges" in data else "node" if "node_id" in data else "kickoff"
    return None


def parse_payload(data: Mapping[str, object]) -> Payload:
    """A coordinator message as the previous version wrote it (a dict with ``run_id``
    and ``execution_id``); a ``ValidationError`` for anything else."""
    return _PAYLOAD.validate_python(data)


_MESSAGE = TypeAdapter(NodeMessage)
_OUTCOME = TypeAdapter(NodeOutcome)
_EDGE_REF = TypeAdapter(EdgeRef)
_META = TypeAdapter(FanoutMeta)
_REDUCED = TypeAdapter(ReducerOutcome)
_KICKOFF = TypeAdapter(Kickoff)
_PAYLOAD: TypeAdapter[Payload] = TypeAdapter(Annotated[
    Annotated[ReducerOutcome, Tag("reducer")] | Annotated[NodeOutcome, Tag("node")]
    | Annotated[Kickoff, Tag("kickoff")], Discriminator(_shape)])


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
