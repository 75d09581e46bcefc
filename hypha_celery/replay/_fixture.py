"""Capture a run's events as a replay fixture: the events plus the projections that
:func:`~hypha_celery.replay.compare` checks. Pure: no store, model, tool or network."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic reads it (python < 3.12)

from hypha_celery.errors import EmptyTrace, InvalidContract, MixedRunTrace
from hypha_celery.events import payloads as ev
from hypha_celery.events.envelope import META_PREFIXES, Event, canonical, derived_alone
from hypha_celery.jsontypes import JsonObject, JsonValue
from hypha_celery.projections._audit import state_path
from hypha_celery.replay._spec import ReplaySpec

#: The fixture file format; a loader refuses anything else.
FIXTURE_VERSION = 1

TERMINAL = ("run.completed", "run.failed", "run.cancelled")
TOOL_OUTCOMES = ("tool.call.completed", "tool.call.failed", "tool.call.rejected")
#: ``source`` in a tool-call signature: the output came from the recorded event.
SOURCE = "recorded"


class Snapshot(TypedDict):
    """The run state after one outcome that changed it (``snapshot_policy="full"``)."""

    seq: int
    step: str
    execution_id: str | None
    state: JsonObject


class ReplayFixture(BaseModel):
    """A captured run. ``events`` are the run's own events (never ``eval.*``,
    ``replay.*``, ``regression.*``) in ``seq`` order, filtered by ``replay_spec``; every
    other list is a projection of them (see :func:`project`)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    version: int = FIXTURE_VERSION
    run_id: str
    created_at: float
    replay_spec: ReplaySpec = Field(default_factory=ReplaySpec)
    events: list[Event]
    event_types: list[str]
    state_path: list[str]
    final_output: JsonValue = None
    tool_calls: list[str]
    model_calls: list[str]
    policy_decisions: list[str]
    memory_read_set: list[str]
    #: what went into the model calls (absent from fixtures captured before they were
    #: recorded): ``step|skill|version|content_hash`` per ``skill.loaded``,
    #: ``step|context_hash`` per ``context.build.completed``, ``step|decision`` per
    #: ``reasoning.decision.recorded``
    skill_activations: list[str] = Field(default_factory=list)
    context_hashes: list[str] = Field(default_factory=list)
    reasoning_decisions: list[str] = Field(default_factory=list)
    #: ``snapshot_policy="full"``: ``{seq, step, execution_id, state}`` after each outcome
    snapshots: list[Snapshot] | None = None
    #: a JSON Schema the run's final output must satisfy (regression ``output_contract``)
    output_contract: JsonObject | None = None
    metadata: JsonObject = Field(default_factory=dict)


class Projection(BaseModel):
    """What :func:`project` derives from a list of events."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    events: list[Event]
    event_types: list[str]
    state_path: list[str]
    final_output: JsonValue = None
    tool_calls: list[str]
    model_calls: list[str]
    policy_decisions: list[str]
    memory_read_set: list[str]
    skill_activations: list[str]
    context_hashes: list[str]
    reasoning_decisions: list[str]
    snapshots: list[Snapshot] | None = None


def own_events(events: Iterable[Event]) -> list[Event]:
    """``events`` without evaluation's own (``eval.*``, ``replay.*``, ``regression.*``),
    in ``seq`` order (stable)."""
    return sorted((e for e in events if not e.type.startswith(META_PREFIXES)),
                  key=lambda e: e.seq)


def _step(event: Event) -> str:
    """The event's ``step_id``; for an event built without one, the envelope's rule (the
    payload's ``step``, else the step in its execution id ``<run>.<step>[.<edge>]``)."""
    if event.step_id is not None:
        return event.step_id
    step = derived_alone(event)[4]
    if step is not None:
        return str(step)
    parts = (event.execution_id or "").split(".")
    return parts[1] if len(parts) >= 2 and parts[1].isdigit() else ""


def _text(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else canonical(value)


def tool_call_signature(event: Event) -> str:
    """``type|step|tool|recorded|stable(output ?? error ?? decision ?? null)``"""
    p = event.body
    assert isinstance(p, ev.ToolCallCompleted | ev.ToolCallFailed | ev.ToolCallRejected)
    if isinstance(p, ev.ToolCallCompleted):
        outcome = p.output
    elif isinstance(p, ev.ToolCallFailed):
        outcome = p.error
    else:
        outcome = p.decision
    return "|".join((event.type, _step(event), _text(p.tool), SOURCE, canonical(outcome)))


def policy_signature(event: Event) -> str:
    """``tool.policy.checked``: ``step|tool|stable(decision)``;
    ``decision.policy.recorded`` (our addition): ``step|type|stable(node_ids)``."""
    if event.type == "decision.policy.recorded":
        d = event.body_as(ev.DecisionPolicyRecorded)
        return "|".join((_step(event), _text(d.type), canonical(list(d.node_ids or []))))
    p = event.body_as(ev.ToolPolicyChecked)
    return "|".join((_step(event), _text(p.tool), canonical(p.decision)))


def memory_read_signature(event: Event) -> str:
    """``step|target``, then ``|id@revision`` per record read (reads that name them)."""
    p = event.body_as(ev.MemoryReadCompleted)
    refs = "".join(f"|{r['id']}@{r['revision']}" for r in p.records or ())
    return f"{_step(event)}|{_text(p.target)}{refs}"


def skill_signature(event: Event) -> str:
    """``step|skill|version|content_hash`` of a ``skill.loaded``."""
    p = event.body_as(ev.SkillLoaded)
    return "|".join((_step(event), p.skill_id, _text(p.version), p.content_hash))


def context_signature(event: Event) -> str:
    """``step|context_hash`` of a ``context.build.completed``."""
    return f"{_step(event)}|{event.body_as(ev.ContextBuildCompleted).context_hash}"


def decision_signature(event: Event) -> str:
    """``step|decision`` of a ``reasoning.decision.recorded``."""
    return f"{_step(event)}|{event.body_as(ev.ReasoningDecisionRecorded).decision}"


def model_call_signature(event: Event) -> str:
    """``type|step|model``"""
    p = event.body
    assert isinstance(p, ev.ModelCallStarted | ev.ModelCallCompleted | ev.ModelCallFailed)
    return f"{event.type}|{_step(event)}|{_text(p.model)}"


def final_output(events: Sequence[Event]) -> JsonValue:
    """The last terminal event's outcome: ``run.completed``'s ``result``, ``{"error":
    reason}`` for ``run.failed`` / ``run.cancelled``; ``None`` before the run ended."""
    for event in reversed(events):
        body = event.body if event.type in TERMINAL else None
        if isinstance(body, ev.RunCompleted):
            return cast(JsonValue, body.result)
        if isinstance(body, ev.RunFailed | ev.RunCancelled):
            reason = body.reason
            return {"error": reason if reason is not None else event.type.removeprefix("run.")}
    return None


def _snapshots(events: Sequence[Event]) -> list[Snapshot]:
    """The run state after each node / reducer outcome that changed it (edge outcomes
    reach the state only through their reducer), as the run projection folds it."""
    state: JsonObject = {}
    out: list[Snapshot] = []
    for event in events:
        if event.type not in ("node.execution.completed", "node.reducer.completed"):
            continue
        p = event.body
        assert isinstance(p, ev.NodeExecutionCompleted | ev.NodeReducerCompleted)
        edge = p.edge_of if isinstance(p, ev.NodeExecutionCompleted) else None
        if edge or not isinstance(p.update, Mapping) or not p.update:
            continue
        state.update(p.update)
        out.append({"seq": event.seq, "step": _step(event),
                    "execution_id": event.execution_id or p.execution_id,
                    "state": copy.deepcopy(state)})
    return out


def project(events: Iterable[Event], spec: ReplaySpec | None = None) -> Projection:
    """The fixture projections of ``events`` (filtered and ordered as a capture would);
    no run-id checks (see :func:`capture`)."""
    spec = spec or ReplaySpec()
    kept = [e for e in own_events(events) if spec.keeps(e.type)]
    return Projection(
        events=kept,
        event_types=[e.type for e in kept],
        state_path=list(state_path(kept)) if spec.snapshot_policy != "none" else [],
        final_output=final_output(kept),
        tool_calls=[tool_call_signature(e) for e in kept if e.type in TOOL_OUTCOMES],
        model_calls=[model_call_signature(e) for e in kept if e.type.startswith("model.call.")],
        policy_decisions=[policy_signature(e) for e in kept
                          if e.type in ("tool.policy.checked", "decision.policy.recorded")],
        memory_read_set=[memory_read_signature(e) for e in kept
                         if e.type == "memory.read.completed"],
        skill_activations=[skill_signature(e) for e in kept if e.type == "skill.loaded"],
        context_hashes=[context_signature(e) for e in kept
                        if e.type == "context.build.completed"],
        reasoning_decisions=[decision_signature(e) for e in kept
                             if e.type == "reasoning.decision.recorded"],
        snapshots=_snapshots(kept) if spec.snapshot_policy == "full" else None,
    )


def check_single_run(events: Sequence[Event], run_id: str | None = None) -> str:
    """The one run id of ``events`` (or ``run_id``); :class:`MixedRunTrace` names the
    first event of another run, :class:`EmptyTrace` when there is nothing to check."""
    if not events:
        raise EmptyTrace(f"no events to capture{f' for run {run_id}' if run_id else ''} "
                         "(eval.*, replay.* and regression.* do not count)")
    expected = run_id if run_id is not None else events[0].run_id
    for event in events:
        if event.run_id != expected:
            raise MixedRunTrace(event.id or f"{event.run_id}:{event.seq}", event.run_id,
                                expected)
    return expected


def checked_schema(schema: object, name: str = "output contract") -> JsonObject:
    """``schema`` (a JSON object) if it is a valid JSON Schema (Draft 2020-12), else
    :class:`InvalidContract`."""
    if not isinstance(schema, Mapping):
        raise InvalidContract(f"{name} must be a JSON Schema object, not "
                              f"{type(schema).__name__}")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise InvalidContract(f"{name} is not a valid JSON Schema"
                              f"{f' (at {where})' if where else ''}: {exc.message}") from None
    return cast(JsonObject, dict(schema))  # a valid JSON Schema is JSON


def capture(
    events: Iterable[Event], spec: ReplaySpec | None = None, *, run_id: str | None = None,
    fixture_id: str | None = None, output_contract: Mapping[str, object] | None = None,
    metadata: Mapping[str, JsonValue] | None = None, now: Callable[[], float] = time.time,
) -> ReplayFixture:
    """A :class:`ReplayFixture` of one run's ``events``.

    ``eval.*`` / ``replay.*`` / ``regression.*`` events are left out, the rest ordered by
    ``seq`` and filtered by ``spec`` (default ``ReplaySpec()``: everything). Raises
    :class:`EmptyTrace` when no event is left and :class:`MixedRunTrace` when the events
    belong to more than one run (or not to ``run_id``, when given). The fixture id
    defaults to the run id. Pure: reads nothing, calls nothing.
    """
    spec = spec or ReplaySpec()
    contract = checked_schema(output_contract) if output_contract is not None else None
    own = own_events(events)
    rid = check_single_run(own, run_id)
    projection = project(own, spec)
    return ReplayFixture(
        id=fixture_id or rid, run_id=rid, created_at=now(), replay_spec=spec,
        output_contract=contract,
        metadata=dict(metadata or {}), **projection.model_dump(exclude={"events"}),
        events=projection.events,
    )
