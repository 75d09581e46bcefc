"""One payload model per event type: what each event of the log carries, typed.

:data:`PAYLOADS` maps every :data:`~hypha_celery.events.kinds.EventType` to its model (a
frozen pydantic model with a ``kind`` class variable). Writers build a model and append
it (:meth:`Tx.emit <hypha_celery.store.tx.Tx.emit>`, :meth:`EventLog.emit
<hypha_celery.store.events.EventLog.emit>`, :func:`hypha_celery.runtime.lifecycle.emit`):
a misspelt or missing field is a mypy error, an unknown keyword a ``ValidationError``.
Readers take :attr:`Event.body <hypha_celery.events.envelope.Event.body>` or
:func:`payload_as` and read attributes.

The JSON is the one the log always held: :meth:`Payload.dump` gives the fields the
writer set, under their JSON names, in field order (a field left to its default is not
written, as the hand-built dicts never wrote it), so the rows of earlier versions are
these models' JSON too (``tests/events/test_payloads.py`` loads recorded rows of each
type). User data (a node's input and output, a run's result, a model or tool call's
output, a review's subject) is a field of type ``Any`` holding the JSON value as it is,
never turned into fields; nested records the runtime built (errors, fan-out edges) are
``TypedDict`` s passed through unvalidated: their writer typed them already.

Reading is trusted (:func:`payload_of`): the store checked the JSON when it was
appended or imported, so the model is built without validation (no per-field checks on
the fold's hot path); a key the model does not know is not one of its fields, and a
field the row lacks takes its default (a required one is missing: reading it raises
``AttributeError``, as a missing key raised ``KeyError``). :func:`parse_payload`
validates (an unknown field is an error), for input from outside.

Facts anyone may record (:func:`hypha_celery.evaluation.record`: model and tool calls,
workflow steps, human review, messages, memory, evaluation) come in more shapes than the
runtime writes (an import of hypha's exports, an application's own): their fields are
optional but for what every reader needs. The runtime's own families (``run.``,
``node.``, ``decision.``, ``recovery.``, ``agent.``) have one writer, and their models
say exactly what it writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Annotated, Any, ClassVar, Literal, NotRequired, ParamSpec, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, SkipValidation
from pydantic.fields import FieldInfo
from typing_extensions import TypedDict

from hypha_celery.errors import UnknownEventKind
from hypha_celery.events.kinds import KINDS, EventType
from hypha_celery.events.view import ErrorJson
from hypha_celery.jsontypes import JsonObject

__all__ = [
    "PAYLOADS", "AgentActionSelected", "AgentDeliberationCompleted",
    "AgentDeliberationStarted", "AgentDraining", "AgentHalted", "AgentRequestCancelled",
    "AgentResumed", "AgentStarted", "AgentStopped", "AgentTurnCompleted",
    "AgentTurnFailed", "AgentTurnLateResult", "AgentTurnStarted",
    "ContextBuildCompleted", "ContextBuildFailed", "ContextBuildStarted",
    "ContextCompacted", "DecisionPolicyRecorded", "DecisionType", "Error",
    "EvalCompleted", "EvalFailed", "EvalStarted", "FanoutEdge", "FsmStateEntered",
    "FsmTransitionAccepted", "FsmTransitionRejected", "HumanReviewApproved",
    "HumanReviewCancelled", "HumanReviewExpired", "HumanReviewRejected",
    "HumanReviewRequested", "InferenceCompleted", "McpCallCompleted", "McpCallFailed",
    "McpCallStarted", "McpCapabilityApproved", "McpCapabilityDiscovered",
    "McpCapabilityDriftDetected", "McpCapabilityQuarantined",
    "McpCapabilityTrustEvaluated", "McpToolNormalized", "MemoryDeleteCompleted",
    "MemoryDeleteFailed", "MemoryDeleteRequested", "MemoryReadCompleted",
    "MemoryReadFailed", "MemoryReadRequested", "MemoryRef", "MemoryWriteCommitted",
    "MemoryWriteRejected", "MemoryWriteRequested", "MemoryWriteValidated",
    "MessageAcknowledged", "MessageDeadLettered", "MessageDelivered", "MessageEnqueued",
    "MessageFailed", "MessageRetrying", "ModelCallCompleted", "ModelCallFailed",
    "ModelCallStarted", "NodeExecutionCompleted", "NodeExecutionDeadLettered",
    "NodeExecutionFailed", "NodeExecutionLateResult", "NodeExecutionRedelivered",
    "NodeExecutionRetrying", "NodeExecutionScheduled", "NodeExecutionStarted",
    "NodeFanoutScheduled", "NodeReducerCompleted", "NodeReducerFailed", "Payload",
    "ReactStepCompleted", "ReasoningDecisionRecorded", "RecoveryCaseAttempted",
    "RecoveryCaseCompensated", "RecoveryCaseCompensationStarted",
    "RecoveryCaseEscalated", "RecoveryCaseOpened", "RecoveryCaseQuarantined",
    "RecoveryCaseResolved", "RecoveryCircuitOpened", "RecoveryDeadLetterRedriven",
    "RecoveryNodeTimedOut", "RecoveryOutcomeReconciled", "RecoveryRedriveExhausted",
    "RecoveryRunRedriven", "RegressionCompleted", "RegressionFailed",
    "RegressionStarted", "ReplayCompleted", "ReplayFailed", "ReplayStarted",
    "RunCancelRequested", "RunCancelled", "RunCompleted", "RunCreated", "RunFailed",
    "RunParked", "RunPayload", "RunQuarantined", "RunQueued", "RunRedriven",
    "RunReleased", "RunStarted", "RunSuspended", "RunWaitingHuman", "SessionClosed",
    "SessionCreated", "SessionPayload", "SessionUpdated", "SkillCompleted",
    "SkillFailed", "SkillLoaded", "SkillSelected", "TerminalPayload",
    "ThinkingCompleted", "ThinkingStarted", "ToolCallApproved", "ToolCallCompleted",
    "ToolCallFailed", "ToolCallRejected", "ToolCallRequested", "ToolCallStarted",
    "ToolOutputInvalid", "ToolOutputValidated", "ToolPolicyChecked", "model_of",
    "parse_payload", "payload_as", "payload_of", "reader", "trusted"
]

P = TypeVar("P", bound="Payload")
Ps = ParamSpec("Ps")

#: What a decision policy decided (``decision.policy.recorded``'s ``type``).
DecisionType = Literal["next", "fanout", "fail", "review", "finish"]
#: An error as data (``type``, ``message``, ``class``, ...), written as its writer built it.
Error = Annotated[ErrorJson, SkipValidation]


class FanoutEdge(TypedDict):
    """One edge of ``node.fanout.scheduled``: its execution, node and input (user data);
    ``attempt`` from the second attempt on (a released quarantine)."""

    execution_id: str
    node_id: str
    input: Any
    attempt: NotRequired[int]


class Payload(BaseModel):
    """The payload of one event type (:attr:`kind`). Frozen; an unknown keyword is an
    error; :meth:`dump` is its JSON as the log stores it."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True,
                              validate_by_alias=True)

    kind: ClassVar[EventType]
    #: ``(attribute, JSON name)`` of each field, in field order (set per class).
    _names: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: The defaults a trusted read fills in (:func:`payload_of`).
    _defaults: ClassVar[dict[str, Any]] = {}
    #: JSON name -> attribute, for the fields whose names differ.
    _renamed: ClassVar[dict[str, str]] = {}
    #: The attribute names, when unknown keys are kept (``extra="allow"``); else empty.
    _kept: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        fields: dict[str, FieldInfo] = cls.model_fields
        cls._names = tuple((name, f.serialization_alias or name) for name, f in fields.items())
        cls._defaults = {name: f.default for name, f in fields.items()
                         if not f.is_required() and f.default_factory is None}
        cls._renamed = {json: name for name, json in cls._names if json != name}
        if cls.model_config.get("extra") == "allow":
            cls._kept = frozenset(fields)

    def dump(self) -> dict[str, Any]:
        """The event's JSON object: the fields set, under their JSON names, in order."""
        values, given = self.__dict__, self.__pydantic_fields_set__
        return {json: values[name] for name, json in self._names if name in given}


def _alias(name: str) -> Any:
    """A field whose JSON name (``from``) is a Python keyword: ``from_`` in Python."""
    return Field(default=None, validation_alias=name, serialization_alias=name)


class _Reserved(Payload):
    """A type of the taxonomy that no writer of this package appends yet (an
    application may): the fields its readers use, and any others kept as they are."""

    model_config = ConfigDict(extra="allow")

    def dump(self) -> dict[str, Any]:
        return {**super().dump(), **(self.__pydantic_extra__ or {})}


# -- the run lifecycle (only hypha_celery.runtime.lifecycle appends these) ----------------
class RunCreated(Payload):
    """A run begins: its graph, its input (user data) and its owner."""

    kind: ClassVar[EventType] = "run.created"
    graph_id: str
    input: Any = None
    user_id: str | None = None
    session_id: str | None = None
    lane: str | None = None
    deadline: float | None = None
    max_steps: int | None = None
    notify: dict[str, Any] | None = None
    idempotency_key: str | None = None


class RunQueued(Payload):
    kind: ClassVar[EventType] = "run.queued"
    behind: str | None  # the lane's active run


class RunStarted(Payload):
    kind: ClassVar[EventType] = "run.started"
    execution_id: str  # the kickoff's


class RunCancelRequested(Payload):
    kind: ClassVar[EventType] = "run.cancel.requested"
    revoked: list[str]  # the task ids revoked


class RunParked(Payload):
    """A dead-lettered node holds the run until a redrive."""

    kind: ClassVar[EventType] = "run.parked"
    execution_id: str
    node_id: str
    dead_letter_id: int | None


class RunQuarantined(Payload):
    """An at-most-once node's effect is unknown: a human decides."""

    kind: ClassVar[EventType] = "run.quarantined"
    execution_id: str
    node_id: str | None = None
    attempt: int = 1
    reason: str | None = None


class RunSuspended(Payload):
    """The awaited node parked the run until a message comes (``AwaitingMessage``):
    no worker holds it; the message's publish resumes it (``run.released``, action
    ``message``: the node runs again as its next attempt), ``until`` times it out."""

    kind: ClassVar[EventType] = "run.suspended"
    execution_id: str
    node_id: str
    attempt: int
    message_id: str
    queue: str
    until: float


class RunReleased(Payload):
    kind: ClassVar[EventType] = "run.released"
    execution_id: str
    attempt: int | None = None
    action: str | None = None
    deadline: float | None = None
    by: str | None = None


class RunRedriven(Payload):
    """A parked run's dead letter sent again, as a new execution."""

    kind: ClassVar[EventType] = "run.redriven"
    dead_letter_id: int
    execution_id: str
    node_id: str
    input: Any = None
    deadline: float | None = None
    by: str | None = None


class RunWaitingHuman(Payload):
    kind: ClassVar[EventType] = "run.waiting_human"
    review_id: str | None = None
    at: float | None = None


class RunCompleted(Payload):
    kind: ClassVar[EventType] = "run.completed"
    result: Any = None  # the run's answer (user data)


class RunFailed(Payload):
    """Why the run failed (a ``FailureReason``'s value, or the policy's); ``None`` only in
    a log written elsewhere (hypha's exports): readers say ``failed``."""

    kind: ClassVar[EventType] = "run.failed"
    reason: str | None = None
    message: str = ""
    by: str | None = None


class RunCancelled(Payload):
    kind: ClassVar[EventType] = "run.cancelled"
    reason: str | None = None
    message: str = ""
    by: str | None = None


RunPayload = (RunCreated | RunQueued | RunStarted | RunCancelRequested | RunParked
              | RunQuarantined | RunSuspended | RunReleased | RunRedriven
              | RunWaitingHuman | RunCompleted | RunFailed | RunCancelled)
TerminalPayload = RunCompleted | RunFailed | RunCancelled


class SessionCreated(Payload):
    """A session begins (once per ``(user_id, session_id)``, in the log of the run that
    opened it, right after its ``run.created``): the session profile applied (``profile``,
    of pack ``pack``) and the session's metadata (the profile's defaults under the
    caller's)."""

    kind: ClassVar[EventType] = "session.created"
    session_id: str
    user_id: str | None = None
    profile: str | None = None
    pack: str | None = None
    metadata: JsonObject = {}


class SessionUpdated(Payload):
    """A session's metadata changed: ``metadata`` is the caller's change, merged over
    what the session had (the caller wins, key by key: hypha's ``initializeDomainSession``
    merge). Written in the log of the run that opened the session, like
    ``session.created``."""

    kind: ClassVar[EventType] = "session.updated"
    session_id: str
    user_id: str | None = None
    metadata: JsonObject = {}


class SessionClosed(Payload):
    """A session ends (once): its status is ``closed`` from here on and no run starts in
    it (:class:`~hypha_celery.errors.SessionClosed`). ``reason``: the caller's words.
    Written in the log of the run that opened the session."""

    kind: ClassVar[EventType] = "session.closed"
    session_id: str
    user_id: str | None = None
    reason: str | None = None


SessionPayload = SessionCreated | SessionUpdated | SessionClosed


# -- decisions and node executions ----------------------------------------------------------
class DecisionPolicyRecorded(Payload):
    """What the decision policy decided at ``step``: its ``type`` and the nodes next."""

    kind: ClassVar[EventType] = "decision.policy.recorded"
    step: int
    type: DecisionType
    reducer: str | None = None
    node_ids: list[str] | None = None
    reason: str | None = None


class NodeExecutionScheduled(Payload):
    kind: ClassVar[EventType] = "node.execution.scheduled"
    execution_id: str
    node_id: str
    input: Any = None  # user data
    step: int


class NodeFanoutScheduled(Payload):
    kind: ClassVar[EventType] = "node.fanout.scheduled"
    execution_id: str
    step: int
    reducer: str
    edges: Annotated[list[FanoutEdge], SkipValidation]


class NodeExecutionStarted(Payload):
    kind: ClassVar[EventType] = "node.execution.started"
    execution_id: str
    node_id: str
    attempt: int = 1
    worker: str | None = None
    at_most_once: bool = False


class _NodeOutcome(Payload):
    """A node's (or a fan-out edge's) outcome: its ``update`` (user data) or ``error``."""

    execution_id: str
    node_id: str
    edge_of: str | None = None  # the fan-out of an edge (reaches the state via the reducer)
    index: int | None = None
    error: Error | None = None
    duration: float | None = None
    update: Any = None
    dead_letter_id: int | None = None


class NodeExecutionCompleted(_NodeOutcome):
    kind: ClassVar[EventType] = "node.execution.completed"


class NodeExecutionFailed(_NodeOutcome):
    kind: ClassVar[EventType] = "node.execution.failed"


class _ReducerOutcome(Payload):
    execution_id: str
    reducer: str
    duration: float | None = None
    error: Error | None = None
    update: Any = None


class NodeReducerCompleted(_ReducerOutcome):
    kind: ClassVar[EventType] = "node.reducer.completed"


class NodeReducerFailed(_ReducerOutcome):
    kind: ClassVar[EventType] = "node.reducer.failed"


class NodeExecutionLateResult(Payload):
    kind: ClassVar[EventType] = "node.execution.late_result"
    execution_id: str
    node_id: str
    reason: str


class NodeExecutionRetrying(Payload):
    kind: ClassVar[EventType] = "node.execution.retrying"
    execution_id: str
    node_id: str
    attempt: int  # the attempt that failed
    delay: float | None = None
    at: float | None = None  # when the next attempt runs
    error: Error | None = None


class NodeExecutionRedelivered(Payload):
    kind: ClassVar[EventType] = "node.execution.redelivered"
    execution_id: str
    node_id: str
    delivery: int


class NodeExecutionDeadLettered(Payload):
    kind: ClassVar[EventType] = "node.execution.dead_lettered"
    execution_id: str
    node_id: str
    dead_letter_id: int | None
    reason: str
    attempts: int
    error: Error | None = None


# -- recovery (the supervisor and its operators) --------------------------------------------
class RecoveryRunRedriven(Payload):
    kind: ClassVar[EventType] = "recovery.run.redriven"
    execution_id: str | None
    attempt: int  # the run's re-drives so far
    why: str
    node_attempt: int | None = None


class RecoveryNodeTimedOut(Payload):
    kind: ClassVar[EventType] = "recovery.node.timed_out"
    execution_id: str
    node_id: str
    running: float


class RecoveryOutcomeReconciled(Payload):
    kind: ClassVar[EventType] = "recovery.outcome.reconciled"
    execution_id: str | None
    committed: bool
    source: str


class RecoveryRedriveExhausted(Payload):
    kind: ClassVar[EventType] = "recovery.redrive.exhausted"
    execution_id: str | None
    attempts: int


class RecoveryCircuitOpened(Payload):
    kind: ClassVar[EventType] = "recovery.circuit.opened"
    key: str
    until: float


class RecoveryDeadLetterRedriven(Payload):
    kind: ClassVar[EventType] = "recovery.dead_letter.redriven"
    dead_letter_id: int
    execution_id: str | None
    by: str | None = None


# -- recovery cases (hypha_celery.fsm) ------------------------------------------------------
class _Case(Payload):
    """A workflow state's recovery case: its id (``<run>:case:<n>``), the workflow and
    the state whose failure opened it."""

    case_id: str
    workflow: str | None = None
    state: str


class RecoveryCaseOpened(_Case):
    """A failure of ``node`` in ``state`` opened the case: its fingerprint, its evidence
    hash, the error (``type``, ``class``, ``message``) and the case's limits."""

    kind: ClassVar[EventType] = "recovery.case.opened"
    node: str
    fingerprint: str
    evidence: str
    error: Error
    at: float
    strategies: list[str]
    max_cycles: int
    max_no_progress_cycles: int
    max_same_strategy: int
    max_elapsed: float


class RecoveryCaseAttempted(_Case):
    """One cycle: ``strategy`` (its ``attempt``-th try) enters ``target`` and runs
    ``node``, after the failure of fingerprint / evidence hash (``progress``: its evidence
    differs from the failure before it); ``reason``: why this strategy."""

    kind: ClassVar[EventType] = "recovery.case.attempted"
    cycle: int
    strategy: str
    attempt: int
    target: str
    node: str
    fingerprint: str
    evidence: str
    progress: bool
    reason: str


class RecoveryCaseCompensationStarted(_Case):
    """``node`` runs to undo the committed effect of state ``compensates``, before the
    case escalates (``reason``)."""

    kind: ClassVar[EventType] = "recovery.case.compensation_started"
    node: str
    compensates: str
    reason: str  # why the case escalates once compensated


class RecoveryCaseCompensated(_Case):
    kind: ClassVar[EventType] = "recovery.case.compensated"
    node: str
    compensates: str


class RecoveryCaseQuarantined(_Case):
    """The failure says the run's data cannot be trusted (an invariant): held for a
    person in ``Quarantined``."""

    kind: ClassVar[EventType] = "recovery.case.quarantined"
    reason: str
    evidence: str


class RecoveryCaseResolved(_Case):
    """The case ended ``resolved`` (a retry succeeded) or ``degraded`` (a fallback or a
    degrade did)."""

    kind: ClassVar[EventType] = "recovery.case.resolved"
    status: Literal["resolved", "degraded"]
    strategy: str
    cycles: int


class RecoveryCaseEscalated(_Case):
    """The case ended ``escalated`` to human review: ``reason`` (the limit reached,
    ``strategies_exhausted``, ``not_retryable:<class>``, ``compensation_failed``), the
    states compensated before, the error of a compensation that failed."""

    kind: ClassVar[EventType] = "recovery.case.escalated"
    reason: str
    cycles: int
    compensated: list[str] = []
    error: Error | None = None


# -- model and tool calls -------------------------------------------------------------------
class _Call(Payload):
    """A call a node made through its context: its id, execution and request's hash.
    ``name``: the model or tool in a log written elsewhere (hypha's exports), which
    names it so rather than ``model`` / ``tool``."""

    call_id: str | None = None
    execution_id: str | None = None
    step: int | None = None
    node_id: str | None = None
    attempt: int = 1
    name: str | None = None


class _ModelCall(_Call):
    model: str | None = None
    request_hash: str | None = None
    side_effect: str | None = None
    provider: str | None = None
    request_bytes: int | None = None


class ModelCallStarted(_ModelCall):
    kind: ClassVar[EventType] = "model.call.started"


# A call's end: its outcome, then what it measured (in the order its writer writes them).
class ModelCallCompleted(_ModelCall):
    kind: ClassVar[EventType] = "model.call.completed"
    output: Any = None  # user data
    usage: dict[str, int] | None = None
    latency_ms: float | None = None
    wait_ms: float | None = None
    cost_usd: float | None = None


class ModelCallFailed(_ModelCall):
    kind: ClassVar[EventType] = "model.call.failed"
    error: Error | None = None
    usage: dict[str, int] | None = None
    latency_ms: float | None = None
    wait_ms: float | None = None
    cost_usd: float | None = None
    error_kind: str | None = None  # incomplete_stream, rate_limited, ...


class _ToolCall(_Call):
    """A tool call: through ``ctx.tool`` (execution, request hash, output or error), or a
    governed tool's step (its source and side effect, code, phase, message)."""

    tool: str | None = None
    source: str | None = None
    request_hash: str | None = None
    side_effect: str | None = None


class ToolCallRequested(_ToolCall):
    kind: ClassVar[EventType] = "tool.call.requested"
    input_hash: str | None = None
    permission_scope: str | None = None


class ToolPolicyChecked(_ToolCall):
    kind: ClassVar[EventType] = "tool.policy.checked"
    decision: Any = None  # the policy's verdict (a JSON object; a word in hypha's exports)
    permission_scope: str | None = None


class ToolCallApproved(_ToolCall):
    kind: ClassVar[EventType] = "tool.call.approved"
    review_id: str | None = None
    approved_by: str | None = None


class ToolCallStarted(_ToolCall):
    kind: ClassVar[EventType] = "tool.call.started"
    input_hash: str | None = None


class ToolCallCompleted(_ToolCall):
    kind: ClassVar[EventType] = "tool.call.completed"
    output: Any = None  # user data
    output_hash: str | None = None
    usage: dict[str, int] | None = None
    latency_ms: float | None = None
    wait_ms: float | None = None
    cost_usd: float | None = None


class ToolCallFailed(_ToolCall):
    kind: ClassVar[EventType] = "tool.call.failed"
    code: str | None = None
    phase: str | None = None
    message: str | None = None
    issues: list[str] | None = None
    error: Error | None = None
    usage: dict[str, int] | None = None
    latency_ms: float | None = None
    wait_ms: float | None = None
    cost_usd: float | None = None
    reason: str | None = None  # hypha's exports: why


class ToolCallRejected(_ToolCall):
    kind: ClassVar[EventType] = "tool.call.rejected"
    code: str | None = None
    phase: str | None = None
    message: str | None = None
    reason: str | None = None  # hypha's exports: why
    decision: Any = None  # hypha's exports: the policy's verdict that denied it


class ToolOutputValidated(_ToolCall):
    kind: ClassVar[EventType] = "tool.output.validated"
    output_hash: str | None = None


class ToolOutputInvalid(_ToolCall):
    kind: ClassVar[EventType] = "tool.output.invalid"
    issues: list[str] = []


# -- the MCP gateway (hypha_celery.mcp) -------------------------------------------------------
class _McpCapability(Payload):
    """What every capability event says first: the server profile's id and the
    capability's name on that server (a tool's, a resource's URI, a prompt's)."""

    server: str
    capability: str


class McpCapabilityDiscovered(_McpCapability):
    kind: ClassVar[EventType] = "mcp.capability.discovered"
    capability_type: Literal["tool", "resource", "prompt"] = "tool"
    capability_hash: str | None = None


class McpCapabilityTrustEvaluated(_McpCapability):
    """The side-effect level the server declared and the one hypha uses under the
    profile's trust (an untrusted ``read`` / ``none`` becomes ``external_effect``)."""

    kind: ClassVar[EventType] = "mcp.capability.trust.evaluated"
    trust: str
    declared: str
    side_effect: str


class McpCapabilityDriftDetected(_McpCapability):
    """A tool ``added`` (no baseline), ``changed`` (another hash) or ``removed``."""

    kind: ClassVar[EventType] = "mcp.capability.drift.detected"
    change: Literal["added", "changed", "removed"]
    capability_hash: str | None = None
    baseline_hash: str | None = None


class McpCapabilityQuarantined(_McpCapability):
    kind: ClassVar[EventType] = "mcp.capability.quarantined"
    capability_hash: str | None = None
    reason: str | None = None


class McpCapabilityApproved(_McpCapability):
    kind: ClassVar[EventType] = "mcp.capability.approved"
    capability_hash: str
    approved_by: str | None = None


class McpToolNormalized(_McpCapability):
    """A tool registered as a ``ToolSpec`` (``tool``: ``<server>.<name>``)."""

    kind: ClassVar[EventType] = "mcp.tool.normalized"
    tool: str
    side_effect: str
    capability_hash: str


class _McpCall(_McpCapability):
    tool: str


class McpCallStarted(_McpCall):
    kind: ClassVar[EventType] = "mcp.call.started"
    transport: str | None = None


class McpCallCompleted(_McpCall):
    kind: ClassVar[EventType] = "mcp.call.completed"
    latency_ms: float | None = None
    result_bytes: int | None = None


class McpCallFailed(_McpCall):
    """``error``: the typed error (``type``, ``class``); ``outcome_unknown``: an effect
    call lost mid-way (it may have happened)."""

    kind: ClassVar[EventType] = "mcp.call.failed"
    error_class: str | None = None
    error_type: str | None = None
    message: str | None = None
    latency_ms: float | None = None
    outcome_unknown: bool = False


# -- workflows (hypha_celery.fsm) -----------------------------------------------------------
class FsmStateEntered(Payload):
    kind: ClassVar[EventType] = "fsm.state.entered"
    workflow: str | None = None
    state: str | None = None
    from_: str | None = _alias("from")
    step: int | None = None


class FsmTransitionAccepted(Payload):
    kind: ClassVar[EventType] = "fsm.transition.accepted"
    workflow: str | None = None
    from_: str | None = _alias("from")
    to: str
    guard: str | None = None


class FsmTransitionRejected(Payload):
    kind: ClassVar[EventType] = "fsm.transition.rejected"
    workflow: str | None = None
    from_: str | None = _alias("from")
    to: str
    reason: str
    message: str = ""


# -- human review ---------------------------------------------------------------------------
class HumanReviewRequested(Payload):
    """A review the run waits for (``subject``: user data); a governed tool's approval
    request also names its call (``call_id``, ``tool``, ...)."""

    kind: ClassVar[EventType] = "human.review.requested"
    call_id: str | None = None
    tool: str | None = None
    source: str | None = None
    side_effect: str | None = None
    review_id: str | None = None
    reason: str | None = None
    subject: Any = None
    step: int | None = None
    input_hash: str | None = None
    expires_at: float | None = None


class _ReviewDecided(Payload):
    """A decision on a review: its id, who, what they said, then ``at`` (each subclass
    ends with it: the order its writer writes them)."""

    review_id: str | None = None
    by: str | None = None


class HumanReviewApproved(_ReviewDecided):
    kind: ClassVar[EventType] = "human.review.approved"
    note: str = ""
    at: float | None = None


class HumanReviewRejected(_ReviewDecided):
    kind: ClassVar[EventType] = "human.review.rejected"
    reason: str = ""
    at: float | None = None


class HumanReviewExpired(_ReviewDecided):
    kind: ClassVar[EventType] = "human.review.expired"
    expires_at: float | None = None
    at: float | None = None


class HumanReviewCancelled(_ReviewDecided):
    kind: ClassVar[EventType] = "human.review.cancelled"
    reason: str = ""
    at: float | None = None


# -- the message bus (hypha_celery.bus) ------------------------------------------------------
class _MessageFact(_Reserved):
    """A delivery fact of one bus message, in the log of the message's run: its id and
    type, the queue (``user:session:kind:id``), the endpoints (``{kind, id}``), the
    delivery attempt and the status it reached. Content free: never the payload. Other
    fields (an import of hypha's own) are kept as they are."""

    message_id: str | None = None
    type: str | None = None
    queue: str | None = None
    from_: Any = _alias("from")
    to: Any = None
    status: str | None = None
    attempt: int | None = None
    correlation_id: str | None = None
    causation_id: str | None = None
    fsm_state: str | None = None


class MessageEnqueued(_MessageFact):
    kind: ClassVar[EventType] = "message.enqueued"


class MessageDelivered(_MessageFact):
    kind: ClassVar[EventType] = "message.delivered"


class MessageRetrying(_MessageFact):
    """``fail(retry=True)`` with attempts left: available again at ``available_at``
    (after ``delay_ms``)."""

    kind: ClassVar[EventType] = "message.retrying"
    reason: str | None = None
    delay_ms: int | None = None
    available_at: float | None = None


class MessageAcknowledged(_MessageFact):
    kind: ClassVar[EventType] = "message.acknowledged"


class MessageFailed(_MessageFact):
    kind: ClassVar[EventType] = "message.failed"
    reason: str | None = None


class MessageDeadLettered(_MessageFact):
    """Dead-lettered: ``reason`` is ``expired``, ``delivery_attempt_budget_exhausted``,
    ``poison`` or the consumer's own."""

    kind: ClassVar[EventType] = "message.dead_lettered"
    reason: str | None = None


# -- context, skills, memory: counts, budgets, hashes and references, never content -------
class _Build(Payload):
    """One context build (``build_id``) before a model call of ``purpose`` (``react``,
    ``llm``, ``agent``) at ReAct ``step`` / graph ``node`` when there is one."""

    build_id: str
    step: int | None = None
    node: str | None = None
    execution_id: str | None = None  # a node's fact: its execution


class ContextBuildStarted(_Build):
    kind: ClassVar[EventType] = "context.build.started"
    purpose: str
    budget: int  # total tokens
    budgets: dict[str, int]  # tokens per source
    candidates: dict[str, int]  # items offered per source
    tokenizer: str


class ContextBuildCompleted(_Build):
    """``context_hash`` is the SHA-256 of the built context's canonical JSON: equal on
    every worker for the same inputs."""

    kind: ClassVar[EventType] = "context.build.completed"
    items: int
    tokens: int
    tokens_by_source: dict[str, int]
    items_by_source: dict[str, int]
    dropped: int = 0
    compacted: int = 0
    context_hash: str


class ContextBuildFailed(_Build):
    kind: ClassVar[EventType] = "context.build.failed"
    error: str  # the error's type name
    reason: str


class ContextCompacted(_Build):
    """Items of ``source`` compacted by ``strategy`` (``drop_oldest``, ``truncate``,
    ``drop_lowest_score``) to fit its budget."""

    kind: ClassVar[EventType] = "context.compacted"
    source: str
    strategy: str
    items_before: int
    items_after: int
    tokens_before: int
    tokens_after: int


class _Skill(Payload):
    skill_id: str
    version: str | None = None
    build_id: str | None = None
    execution_id: str | None = None  # a node's fact: its execution


class SkillSelected(_Skill):
    """Selected by ``activation`` (``always``, ``keyword``, ``regex``, ``intent``,
    ``manual``; ``required`` when only a state's required list brought it in)."""

    kind: ClassVar[EventType] = "skill.selected"
    activation: str
    required: bool = False
    priority: int = 0


class SkillLoaded(_Skill):
    kind: ClassVar[EventType] = "skill.loaded"
    content_hash: str
    chars: int
    tokens: int
    assets: int = 0
    truncated: bool = False


class SkillCompleted(_Skill):
    """The skill's instructions went into a model call (``step``)."""

    kind: ClassVar[EventType] = "skill.completed"
    step: int | None = None


class SkillFailed(_Skill):
    kind: ClassVar[EventType] = "skill.failed"
    required: bool = False
    reason: str


class MemoryRef(TypedDict):
    """One record a read returned: its id and the revision read (and its rank, from a
    node's ``ctx.recall``)."""

    id: str
    revision: int
    score: NotRequired[float]


class _MemoryOp(Payload):
    """One memory operation (``operation_id``: a write's idempotency key; a node's
    memory call's id, with its ``execution_id`` and ``attempt``)."""

    operation_id: str
    step: int | None = None
    execution_id: str | None = None
    attempt: int | None = None


class MemoryReadRequested(_MemoryOp):
    kind: ClassVar[EventType] = "memory.read.requested"
    scope: str  # the scope's key (ids only)
    query_hash: str
    limit: int
    memory_types: list[str] | None = None
    target: str | None = None


class MemoryReadCompleted(_Reserved):
    """A read's result as references (``records``: id and revision; no body). Older
    logs (and applications) wrote ``target`` and ``step`` only: unknown keys are kept."""

    kind: ClassVar[EventType] = "memory.read.completed"
    target: str | None = None
    step: int | None = None
    operation_id: str | None = None
    records: list[MemoryRef] | None = None
    execution_id: str | None = None
    attempt: int | None = None


class MemoryReadFailed(_MemoryOp):
    kind: ClassVar[EventType] = "memory.read.failed"
    error: str
    reason: str


class MemoryWriteRequested(_MemoryOp):
    kind: ClassVar[EventType] = "memory.write.requested"
    scope: str
    memory_type: str
    record_id: str | None = None
    expected_revision: int | None = None
    request_hash: str | None = None  # a node's write: what a replay checks


class MemoryWriteValidated(_MemoryOp):
    kind: ClassVar[EventType] = "memory.write.validated"
    record_id: str | None = None


class MemoryWriteCommitted(_MemoryOp):
    """``reused``: the operation id was written before; nothing new was written."""

    kind: ClassVar[EventType] = "memory.write.committed"
    record_id: str
    revision: int
    reused: bool = False


class MemoryWriteRejected(_MemoryOp):
    """``review``: the policy asks for a review; nothing was written."""

    kind: ClassVar[EventType] = "memory.write.rejected"
    error: str
    reason: str
    review: bool = False


class MemoryDeleteRequested(_MemoryOp):
    kind: ClassVar[EventType] = "memory.delete.requested"
    record_id: str


class MemoryDeleteCompleted(_MemoryOp):
    kind: ClassVar[EventType] = "memory.delete.completed"
    record_id: str
    revision: int


class MemoryDeleteFailed(_MemoryOp):
    kind: ClassVar[EventType] = "memory.delete.failed"
    record_id: str
    error: str
    reason: str


# -- reasoning: summaries and decisions, never a provider's raw thinking -------------------
class _Reasoning(Payload):
    step: int | None = None
    node: str | None = None
    execution_id: str | None = None  # a node's fact: its execution


class ThinkingStarted(_Reasoning):
    kind: ClassVar[EventType] = "thinking.started"
    mode: str  # summary | structured


class ThinkingCompleted(_Reasoning):
    """What a provider's thinking cost (``chars``, ``tokens``: counted, never stored) and
    an optional ``summary`` the application gave (bounded; the console hides it unless
    content is shown)."""

    kind: ClassVar[EventType] = "thinking.completed"
    mode: str
    chars: int = 0
    tokens: int | None = None
    summary: str | None = None


class AgentDeliberationStarted(_Reasoning):
    kind: ClassVar[EventType] = "agent.deliberation.started"
    options: int


class AgentDeliberationCompleted(_Reasoning):
    kind: ClassVar[EventType] = "agent.deliberation.completed"
    options: int
    chosen: str | None = None


class ReasoningDecisionRecorded(_Reasoning):
    kind: ClassVar[EventType] = "reasoning.decision.recorded"
    decision: str
    reason: str | None = None


class AgentActionSelected(_Reasoning):
    """``action``: ``tool``, ``finish``, ``model`` or ``human_review``."""

    kind: ClassVar[EventType] = "agent.action.selected"
    action: str
    tool: str | None = None


class InferenceCompleted(_Reasoning):
    """One inference of a reasoning step: its model, tokens and the context it saw."""

    kind: ClassVar[EventType] = "inference.completed"
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: float | None = None
    context_hash: str | None = None


class ReactStepCompleted(_Reasoning):
    kind: ClassVar[EventType] = "react.step.completed"
    phase: str | None = None
    action: str | None = None


# -- evaluation, replay, regression ---------------------------------------------------------
class EvalStarted(Payload):
    kind: ClassVar[EventType] = "eval.started"
    contracts: list[str]
    traces: list[str]
    specs: list[str]


class EvalCompleted(Payload):
    kind: ClassVar[EventType] = "eval.completed"
    summary: Mapping[str, Any]  # ids, verdicts and scores only


class EvalFailed(Payload):
    kind: ClassVar[EventType] = "eval.failed"
    error: str


class ReplayStarted(Payload):
    kind: ClassVar[EventType] = "replay.started"
    fixture_id: str


class ReplayCompleted(Payload):
    kind: ClassVar[EventType] = "replay.completed"
    fixture_id: str
    events: int
    state_path: list[Any]
    tool_calls: int
    model_calls: int
    policy_decisions: int
    memory_reads: int
    skill_activations: int | None = None
    context_builds: int | None = None
    reasoning_decisions: int | None = None


class ReplayFailed(Payload):
    kind: ClassVar[EventType] = "replay.failed"
    fixture_id: str
    error: str


class _Regression(Payload):
    spec_id: str
    case_id: str
    fixture_id: str


class RegressionStarted(_Regression):
    kind: ClassVar[EventType] = "regression.started"
    checks: list[str]


class RegressionCompleted(_Regression):
    kind: ClassVar[EventType] = "regression.completed"
    status: Literal["passed", "failed"]
    checks: dict[str, bool]


class RegressionFailed(_Regression):
    kind: ClassVar[EventType] = "regression.failed"
    error: str


# -- an agent's stream (content free: ids, origins, reasons) --------------------------------
class AgentStarted(Payload):
    kind: ClassVar[EventType] = "agent.started"
    name: str
    kind_: str = Field(validation_alias="kind", serialization_alias="kind")


class _Turn(Payload):
    ref: str
    attempt: int
    origin: str


class AgentTurnStarted(_Turn):
    kind: ClassVar[EventType] = "agent.turn.started"


class AgentTurnCompleted(_Turn):
    kind: ClassVar[EventType] = "agent.turn.completed"


class AgentTurnFailed(_Turn):
    kind: ClassVar[EventType] = "agent.turn.failed"
    reason: str


class AgentTurnLateResult(_Turn):
    kind: ClassVar[EventType] = "agent.turn.late_result"


class AgentRequestCancelled(Payload):
    kind: ClassVar[EventType] = "agent.request.cancelled"
    ref: str
    reason: str | None = None


class AgentHalted(Payload):
    kind: ClassVar[EventType] = "agent.halted"


class AgentResumed(Payload):
    kind: ClassVar[EventType] = "agent.resumed"


class AgentDraining(Payload):
    kind: ClassVar[EventType] = "agent.draining"


class AgentStopped(Payload):
    kind: ClassVar[EventType] = "agent.stopped"
    reason: str


def _table() -> dict[str, type[Payload]]:
    table: dict[str, type[Payload]] = {}
    stack = list(Payload.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        kind = cls.__dict__.get("kind")
        if kind is not None:
            assert kind not in table, f"two payload models for {kind}"
            table[kind] = cls
    missing = KINDS - table.keys()
    assert not missing, f"event types without a payload model: {sorted(missing)}"
    return table


#: Every event type's payload model.
PAYLOADS: Mapping[str, type[Payload]] = _table()

_set, _new = object.__setattr__, object.__new__
#: Where a pydantic 2 model instance keeps its state: what :func:`_trusted` writes (the
#: envelope's :func:`~hypha_celery.events.envelope._construct` relies on it too).
_LAYOUT = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
_FAST = getattr(BaseModel, "__slots__", None) == _LAYOUT


def _model(kind: str) -> type[Payload]:
    model = PAYLOADS.get(kind)
    if model is None:
        raise UnknownEventKind(f"{kind!r} is not an event type of the taxonomy")
    return model


def _trusted(model: type[P], data: Mapping[str, Any]) -> P:
    """``model`` over ``data`` without validation (what :func:`payload_of` does)."""
    renamed = model._renamed
    if renamed:
        data = {renamed.get(k, k): v for k, v in data.items()}
    return _construct(model, data)


def _keywords(model: type[P], /, **values: Any) -> P:
    return _construct(model, values)


def trusted(model: Callable[Ps, P]) -> Callable[Ps, P]:
    """``model``'s constructor without validation: ``trusted(ModelCallStarted)(call_id=...,
    model=...)``. Its keywords are checked by mypy against the model's own signature (a
    misspelt or mistyped field is an error there, as with ``ModelCallStarted(...)``), not
    at run time.

    For the runtime's writers on the node path, whose values are typed already and
    partly reported by a worker (a call's usage, latency, cost): built several times
    faster than a validated model, and never refused in the coordinator's commit for
    a value a provider reported in another shape."""
    assert isinstance(model, type) and issubclass(model, Payload)
    if model._kept or not _FAST:
        return cast(Callable[Ps, P], partial(_keywords, model))
    defaults = model._defaults

    def build(**values: Any) -> P:  # _construct, the model's lookups done once
        body = _new(model)
        _set(body, "__dict__", {**defaults, **values})
        _set(body, "__pydantic_fields_set__", set(values))
        _set(body, "__pydantic_extra__", None)
        _set(body, "__pydantic_private__", None)
        return cast(P, body)
    return cast(Callable[Ps, P], build)


def _construct(model: type[P], data: Mapping[str, Any]) -> P:
    """``model`` over ``data`` (its attribute names), without validation; the fields set
    are the keys given (a reserved type's extra ones too, as pydantic has them)."""
    given, extra = set(data), None
    if model._kept:
        extra = {k: v for k, v in data.items() if k not in model._kept}
        data = {k: v for k, v in data.items() if k in model._kept}
    values = {**model._defaults, **data}
    if not _FAST:
        return model.model_construct(given, **values, **(extra or {}))
    body = _new(model)
    _set(body, "__dict__", values)
    _set(body, "__pydantic_fields_set__", given)
    _set(body, "__pydantic_extra__", extra)
    _set(body, "__pydantic_private__", None)
    return body


def reader(model: type[P]) -> Callable[[Mapping[str, Any]], P]:
    """:func:`payload_as` for ``model`` as a function of the stored data alone (the
    fold's: no type check per event)."""
    return partial(_trusted, model)


def payload_of(kind: str, data: Mapping[str, Any]) -> Payload:
    """The payload model of an event of type ``kind`` over its stored ``data``, trusted
    (not validated: the log's JSON); :class:`UnknownEventKind` for a type of none."""
    return _trusted(_model(kind), data)


def payload_as(model: type[P], kind: str, data: Mapping[str, Any]) -> P:
    """:func:`payload_of` as ``model``: :class:`UnknownEventKind` when ``kind`` is not
    ``model``'s type."""
    if model.kind != kind:
        raise UnknownEventKind(f"a {kind} event has no {model.__name__} payload")
    return _trusted(model, data)


def parse_payload(kind: str, data: Mapping[str, Any]) -> Payload:
    """The payload model of ``data``, validated: a ``ValidationError`` for a missing,
    mistyped or unknown field (input from outside the log)."""
    return _model(kind).model_validate(data)


def model_of(kind: str) -> type[Payload]:
    """The payload model of event type ``kind``."""
    return _model(kind)
