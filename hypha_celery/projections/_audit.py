"""``audit_view``: what a run decided and did, as data, folded from its events.

hypha's ``projectAudit``: the state path, the decisions, the tool calls, the policy
decisions, plus hypha-celery's failure handling (retries, redeliveries, dead letters,
recovery re-drives, timeouts, a workflow's recovery cases) and the terminal outcome. It
never carries the run's input, its state or its nodes' outputs: node inputs and updates,
the run's result and failure messages stay out. Tool outputs and errors are in (they are
what a tool call audit is about); model calls are named, never their output. Payloads of
policy events are kept without their content keys (``input``, ``update``, ``output``,
...).

Step ids come from the envelope (``Event.step_id``, filled by the store).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from hypha_celery.events import payloads as ev
from hypha_celery.events.envelope import TERMINAL_KINDS, Event
from hypha_celery.projections._cases import AuditCase, recovery_cases
from hypha_celery.projections._run import RunStatus, status_of
from hypha_celery.projections._trace import last_of, run_trace

__all__ = ["AuditDecision", "AuditOutcome", "AuditPolicyDecision", "AuditView", "Counts",
           "ModelCall", "ToolCall", "audit_view", "state_path"]

#: Payload keys that hold run content; policy decisions drop them.
CONTENT_KEYS = frozenset({"input", "state", "update", "result", "output", "error", "message",
                          "request", "args", "arguments", "messages", "prompt", "value"})
ToolOutcome = Literal["completed", "failed", "rejected"]
ModelOutcome = Literal["started", "completed", "failed"]
End = Literal["completed", "failed", "cancelled"]
_TOOL_OUTCOMES: dict[str, ToolOutcome] = {
    "tool.call.completed": "completed", "tool.call.failed": "failed",
    "tool.call.rejected": "rejected"}
_MODEL_OUTCOMES: dict[str, ModelOutcome] = {
    "model.call.started": "started", "model.call.completed": "completed",
    "model.call.failed": "failed"}
_ENDS: dict[str, End] = {
    "run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled"}


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditDecision(_Frozen):
    """One ``decision.policy.recorded``: the step it was taken at, its type
    (``next`` / ``fanout`` / ``finish``) and the nodes (and reducer) it chose."""

    seq: int
    step: int
    type: str
    node_ids: tuple[str, ...] = ()
    reducer: str | None = None


class ToolCall(_Frozen):
    """One finished tool call (``tool.call.completed`` / ``failed`` / ``rejected``)."""

    seq: int
    step_id: str | None
    call_id: str | None
    tool: str | None
    outcome: ToolOutcome
    output: Any = None
    error: dict[str, Any] | None = None
    reason: str | None = None


class ModelCall(_Frozen):
    """One model call: its ``model.call.*`` events paired by ``call_id`` (an event
    without one is a call of its own); ``outcome`` is the newest event's."""

    seq: int
    step_id: str | None
    call_id: str | None
    model: str | None
    outcome: ModelOutcome


class AuditPolicyDecision(_Frozen):
    """An event whose type names a policy, with its payload minus content keys."""

    seq: int
    type: str
    step_id: str | None
    detail: dict[str, Any]


class Counts(_Frozen):
    """Failure handling: node retries and redeliveries, dead-lettered executions,
    recovery re-drives and supervisor timeouts; what the model saw and decided: skills
    activated (``skill.completed``), reasoning decisions, memory writes committed."""

    retries: int = 0
    redeliveries: int = 0
    dead_letters: int = 0
    recoveries: int = 0
    timeouts: int = 0
    skill_activations: int = 0
    reasoning_decisions: int = 0
    memory_writes: int = 0


class ContextBuild(_Frozen):
    """One context built before a model call: sizes and the hash, never content."""

    seq: int
    step_id: str | None
    build_id: str
    items: int
    tokens: int
    tokens_by_source: dict[str, int]
    dropped: int
    compacted: int
    context_hash: str


class SkillActivation(_Frozen):
    seq: int
    skill_id: str
    version: str | None
    content_hash: str


class MemoryRead(_Frozen):
    """A memory read's records, as ``id@revision`` references."""

    seq: int
    step_id: str | None
    operation_id: str | None
    records: tuple[str, ...]


class AuditOutcome(_Frozen):
    """The terminal event: its status, its reason (failed / cancelled) and time."""

    status: End
    reason: str | None = None
    at: float


class AuditView(_Frozen):
    run_id: str
    graph_id: str | None
    status: RunStatus
    state_path: tuple[str, ...]
    decisions: tuple[AuditDecision, ...]
    tool_calls: tuple[ToolCall, ...]
    model_calls: tuple[ModelCall, ...]
    policy_decisions: tuple[AuditPolicyDecision, ...]
    counts: Counts
    outcome: AuditOutcome | None = None
    #: A workflow's recovery cases (``recovery.case.*``), in the order they opened.
    recovery_cases: tuple[AuditCase, ...] = ()
    context_builds: tuple[ContextBuild, ...] = ()
    skill_activations: tuple[SkillActivation, ...] = ()
    memory_reads: tuple[MemoryRead, ...] = ()


def audit_view(events: Iterable[Event]) -> AuditView:
    """The audit of one run from its events (``ValueError`` when empty or mixed). Pure."""
    trace = run_trace(events)
    created = last_of(trace, ("run.created",))
    graph_id = created.body_as(ev.RunCreated).graph_id if created is not None else None
    return AuditView(
        run_id=trace[0].run_id,
        graph_id=graph_id or trace[0].agent_id,
        status=status_of(trace),
        state_path=state_path(trace),
        decisions=tuple(_decision(e) for e in trace if e.type == "decision.policy.recorded"),
        tool_calls=tuple(_tool_call(e) for e in trace if e.type in _TOOL_OUTCOMES),
        model_calls=_model_calls(trace),
        policy_decisions=tuple(_policy(e) for e in trace if "policy" in e.type),
        counts=_counts(trace),
        outcome=_outcome(last_of(trace, TERMINAL_KINDS)),
        recovery_cases=recovery_cases(trace),
        context_builds=tuple(_build(e) for e in trace if e.type == "context.build.completed"),
        skill_activations=tuple(_skill(e) for e in trace if e.type == "skill.loaded"),
        memory_reads=tuple(_read(e) for e in trace if e.type == "memory.read.completed"),
    )


def _build(e: Event) -> ContextBuild:
    p = e.body_as(ev.ContextBuildCompleted)
    return ContextBuild(seq=e.seq, step_id=e.step_id, build_id=p.build_id, items=p.items,
                        tokens=p.tokens, tokens_by_source=dict(p.tokens_by_source),
                        dropped=p.dropped, compacted=p.compacted, context_hash=p.context_hash)


def _skill(e: Event) -> SkillActivation:
    p = e.body_as(ev.SkillLoaded)
    return SkillActivation(seq=e.seq, skill_id=p.skill_id, version=p.version,
                           content_hash=p.content_hash)


def _read(e: Event) -> MemoryRead:
    p = e.body_as(ev.MemoryReadCompleted)
    return MemoryRead(seq=e.seq, step_id=e.step_id, operation_id=p.operation_id,
                      records=tuple(f"{r['id']}@{r['revision']}" for r in p.records or ()))


def state_path(trace: Sequence[Event]) -> tuple[str, ...]:
    """Node ids in the order they were scheduled (a fan-out's edges in edge order)."""
    path: list[str | None] = []
    for e in trace:
        if e.type == "node.execution.scheduled":
            path.append(e.body_as(ev.NodeExecutionScheduled).node_id)
        elif e.type == "node.fanout.scheduled":
            path.extend(edge.get("node_id") for edge in
                        e.body_as(ev.NodeFanoutScheduled).edges or ())
    return tuple(str(node_id) for node_id in path if node_id is not None)


def _decision(e: Event) -> AuditDecision:
    p = e.body_as(ev.DecisionPolicyRecorded)
    return AuditDecision(seq=e.seq, step=int(p.step or 0), type=str(p.type or "-"),
                    node_ids=tuple(str(n) for n in p.node_ids or ()), reducer=p.reducer)


def _text(value: object) -> str | None:
    return str(value) if value is not None else None


def _tool_call(e: Event) -> ToolCall:
    p = e.body
    assert isinstance(p, ev.ToolCallCompleted | ev.ToolCallFailed | ev.ToolCallRejected)
    output = p.output if isinstance(p, ev.ToolCallCompleted) else None
    error = p.error if isinstance(p, ev.ToolCallFailed) else None
    reason = None if isinstance(p, ev.ToolCallCompleted) else p.reason
    return ToolCall(seq=e.seq, step_id=e.step_id, call_id=_text(p.call_id),
                    tool=_text(p.tool or p.name), outcome=_TOOL_OUTCOMES[e.type],
                    output=output, error=dict(error) if error is not None else None,
                    reason=_text(reason))


def _model_calls(trace: Sequence[Event]) -> tuple[ModelCall, ...]:
    calls: dict[str, ModelCall] = {}
    for e in trace:
        outcome = _MODEL_OUTCOMES.get(e.type)
        if outcome is None:
            continue
        p = e.body
        assert isinstance(p, ev.ModelCallStarted | ev.ModelCallCompleted | ev.ModelCallFailed)
        call_id = _text(p.call_id)
        key = call_id or f"#{e.seq}"
        first = calls.get(key)
        calls[key] = ModelCall(
            seq=first.seq if first else e.seq, step_id=e.step_id, call_id=call_id,
            model=_text(p.model or p.name) or (first.model if first else None),
            outcome=outcome)
    return tuple(calls.values())


def _policy(e: Event) -> AuditPolicyDecision:
    detail = {k: v for k, v in e.payload.items() if k not in CONTENT_KEYS}
    return AuditPolicyDecision(seq=e.seq, type=e.type, step_id=e.step_id, detail=detail)


_COUNTED = {"node.execution.retrying": "retries", "node.execution.redelivered": "redeliveries",
            "node.execution.dead_lettered": "dead_letters",
            "recovery.run.redriven": "recoveries", "recovery.node.timed_out": "timeouts",
            "skill.completed": "skill_activations",
            "reasoning.decision.recorded": "reasoning_decisions",
            "memory.write.committed": "memory_writes"}


def _counts(trace: Sequence[Event]) -> Counts:
    counts: dict[str, int] = {}
    for e in trace:
        field = _COUNTED.get(e.type)
        if field is not None:
            counts[field] = counts.get(field, 0) + 1
    return Counts(**counts)


def _outcome(end: Event | None) -> AuditOutcome | None:
    if end is None:
        return None
    body = end.body
    reason = body.reason if isinstance(body, ev.RunFailed | ev.RunCancelled) else None
    return AuditOutcome(status=_ENDS[end.type], reason=_text(reason), at=end.timestamp)
