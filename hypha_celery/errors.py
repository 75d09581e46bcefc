"""Every exception hypha-celery raises on purpose.

The tree, split by phase::

    HyphaError
    ├── SpecError (TypeError)            invalid graph / spec, raised at definition time
    │   ├── GraphSpecError               bad nodes, reducers, limits, names
    │   ├── UnknownGraph (LookupError)   a graph id nobody registered
    │   ├── InvalidNotify                ``notify=`` that is not a Celery signature
    │   ├── AgentSpecError               a bad agent class, backend or start option
    │   ├── InvalidCall                  ``ctx.model`` / ``ctx.tool`` with a non-JSON request
    │   │                                or output, or past the per-execution call bound
    │   ├── NotTheLifecycleWriter        a ``run.*`` event appended by anything but
    │   │                                ``hypha_celery.runtime.lifecycle``
    │   ├── UnknownEventKind             an event type outside the taxonomy appended
    │   ├── MiddlewareSignatureError     a middleware hook the stack cannot call with the
    │   │                                hook's arguments (a wrong override)
    │   ├── GuardError (ValueError)      a guard expression that does not parse or breaks a
    │   │   │                            limit (1,024 chars); ``.expression``, ``.position``
    │   │   └── UnsafeGuardPattern       a ``matches`` regex that is invalid, too long
    │   │                                (128 chars) or unsafe (backreference, lookaround,
    │   │                                nested quantifier)
    │   ├── WorkflowSpecError            a workflow that does not make an FSM (duplicate
    │   │                                states, unknown targets, duplicate (from, to, guard),
    │   │                                retry on a terminal state); ``.problems``
    │   ├── ToolSpecError                a ``ToolSpec`` / tool policy that does not validate
    │   ├── McpProfileError              an MCP server profile that does not validate
    │   ├── InvalidPrincipal (ValueError)  a principal whose role or id does not validate
    │   ├── InvalidModelRef (ValueError) a model reference that is not ``provider:model`` with
    │   │                                a known provider (``openai``, ``openai-chat``,
    │   │                                ``anthropic``) and a non-empty model
    │   ├── PackError                    a DomainPack that does not load: ``.problems`` is
    │   │                                every (path, message) found
    │   ├── SkillError (ValueError)      a ``SKILL.md`` package that does not load: bad front
    │   │   │                            matter, a path escaping its directory, a symlink, a
    │   │   │                            file or asset past its bound; ``.path``, ``.field``
    │   │   └── SkillNotFound (LookupError)  a skill id no registry holds
    │   └── ContextSpecError (ValueError)  context budgets that do not validate (negative,
    │                                    per-source budgets over the total)
    ├── SetupError (RuntimeError)        configuration: URLs, missing extras, store schema
    │   ├── ExtraNotInstalled (ImportError)
    │   ├── SigningKeyMissing            ``export --sign`` / ``import --verify`` without a key
    │   ├── PrivateApiChanged            a library's internals hypha relies on
    │   │                                (``hypha_celery._private_api``) are not there
    │   └── ConsoleConfigError (ValueError)  console settings that do not parse (tokens,
    │                                    address, fixtures directory)
    ├── HyphaRuntimeError (RuntimeError) things that happen while runs execute
    │   ├── LaneBusy                     ``on_busy="reject"`` and the lane has an active run
    │   ├── SessionClosed                a run started in a session that ``session.closed``
    │   │                                ended; nothing was recorded
    │   ├── Overloaded                   a lane's bound (count / bytes) refused an item; ``.info``
    │   ├── TooLarge (ValueError)        a value past its bound at an entry point (a state, a
    │   │   │                            prompt, a message, ...); nothing was recorded;
    │   │   │                            ``.what``, ``.size``, ``.limit``, ``.bound``
    │   │   └── InputTooLarge            ... a run input past ``Settings.max_input_bytes``
    │   ├── NotPermitted (PermissionError)  a scoped client asked for an operator's action
    │   ├── AgentError                   an agent call was refused; ``.reason`` (GenAgent's term)
    │   │   ├── AgentNotFound (LookupError)  no live agent by that name
    │   │   ├── AgentAlreadyStarted      ``start`` with a name that is taken
    │   │   ├── AgentStartFailed         ``init_agent`` / ``start_session`` failed; nothing kept
    │   │   └── TurnFailed               ``ask``: the turn ended in an error; ``.info``
    │   ├── RunNotFound (LookupError)
    │   ├── WaitTimeout (TimeoutError)   ``run.wait(timeout=)`` elapsed; the run goes on
    │   ├── StoreConflict                optimistic append lost a race (internal, retried)
    │   ├── BrokerUnavailable            ``start`` could not enqueue; the run is failed
    │   ├── NotRedrivable                a dead letter / quarantined run an operator can't act on
    │   ├── EffectOutcomeUnknown         a node's effect may or may not have happened: the run
    │   │                                is quarantined (no retry, no ``run.failed``) for a human
    │   ├── AwaitingMessage              not a failure: a node parks its run until a message
    │   │                                comes (``run.suspended``; ``bus.hand_off``)
    │   ├── BackendError                 a conversational backend failed (hypha_celery.backends);
    │   │                                ``.kind``, ``.retryable``; never shows message or raw
    │   ├── InvalidEvent (TypeError)     a backend Event whose kind / data is not plain JSON
    │   ├── TransitionRejected           an FSM transition refused; ``.reason``: not_allowed,
    │   │                                guard_rejected, policy_denied, human_review_required
    │   ├── ToolCallRejected             a governed tool call that did not run; ``.code``
    │   │                                (``TOOL_POLICY_DENIED``, ``TOOL_INPUT_INVALID``, ...)
    │   ├── BusError                     a message bus call was refused (hypha_celery.bus);
    │   │   │                            ``.code`` is hypha's
    │   │   ├── MessageScopeMismatch     a message's user / session is not its run's or the
    │   │   │                            caller's (``MESSAGE_SCOPE_MISMATCH``)
    │   │   ├── MessageAlreadyExists     ``publish`` with an id the bus holds
    │   │   │                            (``MESSAGE_ALREADY_EXISTS``)
    │   │   ├── MessageNotFound (LookupError)  no message by that id
    │   │   ├── UnknownRecipient (LookupError)  ``to`` names no live agent / no run
    │   │   ├── MessageTooLarge (TooLarge)  a payload past ``BusLimits.max_message_bytes``
    │   │   ├── QueueFull (Overloaded)   the recipient queue's count or bytes bound
    │   │   └── HandOffFailed            a workflow's hand-off to an agent got no reply (dead
    │   │                                letter or timeout)
    │   ├── McpError                     an MCP server or tool call failed (hypha_celery.mcp);
    │   │   │                            ``.server``, ``.error_class`` (the retry class)
    │   │   ├── McpUnavailable           the server could not be started / reached or died
    │   │   │                            (transient: the node's retry policy retries it)
    │   │   ├── McpTimeout (TimeoutError)  a call past the profile's ``call_timeout``
    │   │   ├── McpOutcomeUnknown        an effect call (write and up) lost mid-way: it may
    │   │   │                            have happened; never retried (also an
    │   │   │                            ``EffectOutcomeUnknown``: the run is quarantined)
    │   │   ├── McpToolError             the tool answered ``isError``
    │   │   ├── McpResultTooLarge        a result past the profile's ``max_result_bytes``
    │   │   └── CapabilityQuarantined    a new or changed tool no operator accepted yet
    │   ├── ContextError                 a context build failed before any inference
    │   │   │                            (``context.build.failed``)
    │   │   ├── RequiredSkillFailed      "Required skills failed to load: ..." (hypha's text);
    │   │   │                            ``.failures``: (skill id, reason) pairs
    │   │   └── BudgetTooSmall           the required items alone exceed a budget; ``.source``,
    │   │                                ``.needed``, ``.budget``
    │   ├── GovernedMemoryError          a governed memory call was refused; ``.code`` is
    │   │   │                            hypha's; nothing was written
    │   │   ├── MemoryScopeRequired      a write or read without a user scope
    │   │   │                            (``MEMORY_SCOPE_REQUIRED``)
    │   │   ├── MemoryWriteDenied        the write policy denied it, or it needs a review
    │   │   │                            (``.review``)
    │   │   ├── MemoryConflict           an optimistic update lost: the record's revision is
    │   │   │                            not ``expected_revision``; ``.current``
    │   │   ├── MemoryOperationConflict  an operation id written before with another
    │   │   │                            request (idempotency keys are not reused)
    │   │   ├── MemoryNotFound (LookupError)  no record by that id in the caller's scope
    │   │   ├── MemoryRecordTooLarge (TooLarge)  a body past ``MemoryLimits.max_record_bytes``
    │   │   └── InvalidMemoryQuery (ValueError)  a retrieval query that is not valid
    │   │                                full-text syntax
    │   ├── ReviewError                  a human review action that cannot apply
    │   │   └── NoPendingReview (LookupError)  the run is not waiting for that review
    │   ├── ReplayDivergence             re-executing a recorded run: new code did something
    │   │                                else (a call, a decision, an output); ``.where``
    │   ├── NotJsonState (TypeError)     a distributed LangGraph value that is not JSON (and
    │   │                                no serializer takes it); names the channel and type
    │   └── RunFailed                    the run ended ``run.failed``; ``.reason`` says why
    │       ├── RunTimeout               ... because its ``execution_timeout`` passed
    │       ├── RunCancelled             the run ended ``run.cancelled``
    │       └── LangGraphNodeError       a distributed LangGraph node raised an exception
    │                                    whose type cannot be imported; ``.type_name``
    ├── ImportFormatError (ValueError)   ``import`` refused the input; nothing was imported.
    │   │                                The message names the line (``FILE:LINE``) or event id
    │   ├── ImportSourceMissing (FileNotFoundError)  the file to import does not exist
    │   ├── EmptyImport                  the input holds no events
    │   ├── MalformedLine                a line that is not JSON or not an event envelope
    │   │   └── UnknownEventType         ... whose ``type`` is not in hypha's taxonomy
    │   ├── ChecksumMismatch             a line changed after export (checksum wrong / missing)
    │   ├── SignatureMismatch            a signed export that does not verify (a changed,
    │   │                                moved, foreign or missing line; another key)
    │   ├── DerivedFieldMismatch         ``id``, ``correlation_id``, ``causation_id``, ... differ
    │   │                                from what the events themselves give (``enrich``)
    │   ├── InvalidRun                   a run's events do not make a run (duplicate ``seq``,
    │   │   │                            not started by ``run.created``, do not fold)
    │   │   └── IncompleteRun            a gap in a run's ``seq`` numbers
    │   └── ImportConflict               the store holds a different event under that id (or
    │                                    that idempotency key); ``.event_id``
    └── EvaluationError (ValueError)     replay / evaluation / regression input that can't be used
        ├── EmptyTrace                   a capture with no events (eval/replay/regression excluded)
        ├── MixedRunTrace                events of more than one run; ``.event_id`` names one
        ├── FixtureRunMismatch           ``compare(check_run_id=True)`` with another run's events
        ├── InvalidFixture               a file that is not a replay fixture
        ├── InvalidContract              an output contract that is not a valid JSON Schema
        ├── InvalidRegressionSpec        a regression spec (YAML) that does not validate
        └── NotRecordable                recording a type only the runtime writes (``run.*``, ...)

Run failures are *events* first (``run.failed`` with a :class:`FailureReason`);
the exceptions are how a waiting client sees them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class FailureReason(StrEnum):
    """Why a run ended ``run.failed`` (the ``reason`` field of the event)."""

    MAX_STEPS_EXCEEDED = "max_steps_exceeded"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    UNKNOWN_NODE = "unknown_node"
    UNKNOWN_REDUCER = "unknown_reducer"
    FANOUT_TOO_WIDE = "fanout_too_wide"
    INVALID_STATE = "invalid_state"
    STATE_TOO_LARGE = "state_too_large"
    INVALID_DECISION = "invalid_decision"
    POLICY_ERROR = "policy_error"
    NODE_FAILED = "node_failed"
    REDUCER_FAILED = "reducer_failed"
    UNKNOWN_GRAPH = "unknown_graph"
    ENQUEUE_FAILED = "enqueue_failed"
    DEAD_LETTERED = "dead_lettered"
    RECOVERY_EXHAUSTED = "recovery_exhausted"
    QUARANTINED = "quarantined"
    WORKFLOW_FAILED = "workflow_failed"
    TRANSITION_REJECTED = "transition_rejected"
    REVIEW_REJECTED = "review_rejected"
    REVIEW_EXPIRED = "review_expired"


class HyphaError(Exception):
    """Root of every error hypha-celery raises on purpose."""


class SpecError(HyphaError, TypeError):
    """A spec or graph is invalid; raised at definition time, nothing is enqueued."""


class GraphSpecError(SpecError):
    """A graph definition is invalid (nodes, reducers, limits, names)."""


class UnknownGraph(SpecError, LookupError):
    """No graph with this id is registered on this Hypha instance."""


class InvalidNotify(SpecError):
    """``notify=`` must be a Celery signature; nothing was enqueued."""


class AgentSpecError(SpecError):
    """``agents.start`` was given a bad agent class, backend, name or option; nothing
    was recorded."""


class UnknownEventKind(SpecError):
    """An event whose type is not in the taxonomy
    (:data:`hypha_celery.events.envelope.KINDS`) was appended; nothing was written."""


class MiddlewareSignatureError(SpecError):
    """A middleware overrides a hook with a signature the stack cannot call (found when
    the :class:`~hypha_celery.middleware.MiddlewareStack` is built; mypy reports the
    incompatible override too)."""


class SetupError(HyphaError, RuntimeError):
    """Configuration or environment problem (URLs, schema, extras)."""


class ExtraNotInstalled(SetupError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


class SigningKeyMissing(SetupError):
    """Signing or verifying an export needs a key (``HYPHA_EXPORT_KEY``, at least 16
    characters) and there is none, or it is too short."""


class PrivateApiChanged(SetupError):
    """A library's private API that hypha relies on (``hypha_celery._private_api``:
    Celery's consumer hooks, prometheus_client's value class) changed shape in the
    installed version; the message says which and what needs updating."""


class ConsoleConfigError(SetupError, ValueError):
    """The web console's settings do not parse (``HYPHA_CONSOLE_*``)."""


class HyphaRuntimeError(HyphaError, RuntimeError):
    """Raised while runs execute or are observed."""


class LaneBusy(HyphaRuntimeError):
    """``on_busy="reject"``: the (user_id, session_id) lane already has an active run."""

    def __init__(self, lane: str, active_run_id: str) -> None:
        super().__init__(f"lane {lane!r} is busy with run {active_run_id}")
        self.lane = lane
        self.active_run_id = active_run_id


class SessionClosed(HyphaRuntimeError):
    """A run was started in a closed session (its ``session.closed`` exists): nothing
    was recorded. ``.user_id``, ``.session_id``."""

    def __init__(self, user_id: str | None, session_id: str) -> None:
        who = f" of user {user_id!r}" if user_id is not None else ""
        super().__init__(f"session {session_id!r}{who} is closed: start runs in an "
                         "open session")
        self.user_id = user_id
        self.session_id = session_id


class TooLarge(HyphaRuntimeError, ValueError):
    """A value is larger (as compact JSON, or as UTF-8 text) than its bound at an entry
    point: ``what`` names the value, ``bound`` the setting or option that sets the limit.
    Nothing was recorded."""

    def __init__(self, what: str, size: int, limit: int, bound: str) -> None:
        super().__init__(f"{what} is {size} bytes, more than the bound of {limit} "
                         f"({bound}); nothing was recorded")
        self.what, self.size, self.limit, self.bound = what, size, limit, bound


class InputTooLarge(TooLarge):
    """A run's input is larger (as compact JSON) than ``Settings.max_input_bytes``
    (``HYPHA_MAX_INPUT_BYTES``); nothing was recorded."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__("run input", size, limit,
                         "Settings.max_input_bytes, HYPHA_MAX_INPUT_BYTES")


class NotPermitted(HyphaRuntimeError, PermissionError):
    """A client bound to a user principal (``Hypha.as_user``) asked for what only an
    operator may do (a sweep, an import, a purge, a dead letter of no run)."""


class Overloaded(HyphaRuntimeError):
    """A lane refused an item: its pending count or bytes would pass the bound. ``info``
    is GenAgent's overload map (``queue``, ``limit``, ``pending_count``, ``pending_bytes``,
    ``incoming_bytes``, ``max_count``, ``max_bytes``); nothing was recorded."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(f"overloaded: {info.get('queue')} queue full by {info.get('limit')} "
                         f"({info.get('pending_count')}/{info.get('max_count')} items, "
                         f"{info.get('pending_bytes')}/{info.get('max_bytes')} bytes)")
        self.info = info
        self.reason = "overloaded"


class AgentError(HyphaRuntimeError):
    """An agent call was refused or a request ended in an error. ``reason`` is GenAgent's
    error term as a string (``draining``, ``halted``, ``busy``, ``self_stop``, ...); ``info``
    is content free."""

    def __init__(self, reason: str, message: str = "", info: dict[str, Any] | None = None,
                 ) -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.info = info or {}


class AgentNotFound(AgentError, LookupError):
    """No live agent is registered under that name."""

    def __init__(self, name: str) -> None:
        super().__init__("not_found", f"no agent named {name!r}")


class AgentAlreadyStarted(AgentError):
    """``start`` with a name a live agent already has."""

    def __init__(self, name: str) -> None:
        super().__init__("already_started", f"an agent named {name!r} is already running")


class AgentStartFailed(AgentError):
    """``init_agent``, ``pre_run`` or the backend's ``start_session`` failed: reason
    ``init_agent_failed`` / ``backend_start_failed`` / ``init_failed``; nothing was kept."""


class TurnFailed(AgentError):
    """``ask``: the request ended in an error outcome (``timeout``, ``interrupted``,
    ``task_crashed``, a backend reason, ``cancelled``, ``halted``, ``draining``, ...)."""


class RunNotFound(HyphaRuntimeError, LookupError):
    """No run with this id in the event store."""


class WaitTimeout(HyphaRuntimeError, TimeoutError):
    """``wait(timeout=)`` elapsed before the run ended; the run itself goes on."""


class StoreConflict(HyphaRuntimeError):
    """An append lost a race on the run's sequence (handled internally)."""


class BrokerUnavailable(HyphaRuntimeError):
    """``start`` recorded the run but could not publish it: the run is ended
    ``run.failed`` (reason ``enqueue_failed``) so it is never left hanging."""


class NotRedrivable(HyphaRuntimeError):
    """An operator action (``dlq redrive``, ``quarantine release|fail``) that does not
    apply: unknown or already handled record, or a run that no longer awaits it."""


class AwaitingMessage(HyphaRuntimeError):
    """Raised by a node to park its run until a message comes (not a failure): the
    coordinator records ``run.suspended`` and no worker holds the node meanwhile;
    the message's publish resumes the run (the node runs again as its next attempt and
    finds it). ``queue`` is the bus queue the message arrives on, ``message_id`` the
    message it answers (its ``correlation_id``), ``until`` when the wait times out (the
    node's ``NodeTimeout``). :func:`hypha_celery.bus.hand_off` raises it."""

    def __init__(self, message_id: str, queue: str, until: float) -> None:
        super().__init__(f"waiting for the reply to {message_id}")
        self.message_id, self.queue, self.until = message_id, queue, until


class EffectOutcomeUnknown(HyphaRuntimeError):
    """Raised by a node (or subclassed by an error a node raises) when an effect it started
    may or may not have happened: the coordinator quarantines the run (``run.quarantined``,
    reason ``effect_outcome_unknown``) instead of retrying the node or failing the run; an
    operator releases it (the node runs again as its next attempt) or fails it. The node's
    error carries ``"effect": "unknown"`` (:mod:`hypha_celery.runtime.nodes`)."""


class RunFailed(HyphaRuntimeError):
    """The run ended ``run.failed``; ``reason`` is a :class:`FailureReason` value."""

    def __init__(self, run_id: str, reason: str, message: str = "", **details: Any) -> None:
        super().__init__(f"run {run_id} failed: {reason}" + (f": {message}" if message else ""))
        self.run_id = run_id
        self.reason = reason
        self.message = message
        self.details = details


class NotJsonState(HyphaRuntimeError, TypeError):
    """A LangGraph channel value, write or input that is not JSON, in a graph run by
    :func:`hypha_celery.langgraph.distribute` without a serializer that takes it."""


class LangGraphNodeError(RunFailed):
    """A node of a distributed LangGraph graph raised an exception whose type could not be
    imported where ``invoke`` was called; ``type_name`` is its qualified name."""

    def __init__(self, run_id: str, type_name: str, message: str = "") -> None:
        super().__init__(run_id, "node_failed", f"{type_name}: {message}")
        self.type_name = type_name


class RunTimeout(RunFailed):
    """The run failed because its ``execution_timeout`` deadline passed."""


class RunCancelled(RunFailed):
    """The run was cancelled."""

    def __init__(self, run_id: str, reason: str = "cancelled", message: str = "", **details: Any):
        super().__init__(run_id, reason, message, **details)


class ImportFormatError(HyphaError, ValueError):
    """``import`` refused its input (a JSONL export); nothing was imported. The message
    names the line (``FILE:LINE``) or the event id."""


class ImportSourceMissing(ImportFormatError, FileNotFoundError):
    """The file given to ``import`` does not exist (or cannot be read)."""


class EmptyImport(ImportFormatError):
    """The input holds no events (an empty file, or only blank lines)."""


class MalformedLine(ImportFormatError):
    """A line that is not JSON, or not an event envelope (missing, extra or mistyped
    fields)."""


class UnknownEventType(MalformedLine):
    """A line whose ``type`` is not one of hypha's event types."""


class ChecksumMismatch(ImportFormatError):
    """A line whose ``checksum`` is missing or does not match its content: it was changed
    after export."""


class SignatureMismatch(ImportFormatError):
    """A signed export that does not verify: a line changed (even re-sealed), moved or
    taken from another file, lines missing at the end, or another key. The message names
    the line."""


class DerivedFieldMismatch(ImportFormatError):
    """A field the store does not keep (``id``, ``user_id``, ``session_id``, ``agent_id``,
    ``step_id``, ``execution_id``, ``correlation_id``, ``causation_id``) differs from what
    the run's events give."""


class InvalidRun(ImportFormatError):
    """A run's events do not make a run: a duplicate ``seq``, a first event that is not
    ``run.created``, events that do not fold into a projection."""


class IncompleteRun(InvalidRun):
    """A run's events are not numbered 1..n: an event is missing."""


class ImportConflict(ImportFormatError):
    """The store already holds a different event under this id (``<run_id>:<seq>``), or
    another event holds its idempotency key."""

    def __init__(self, event_id: str, message: str) -> None:
        super().__init__(message)
        self.event_id = event_id


class InvalidCall(SpecError):
    """A model / tool call through a node's context that cannot be recorded."""


class ReplayDivergence(HyphaRuntimeError):
    """Re-executing a recorded run, the new code diverged from the recording."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


class EvaluationError(HyphaError, ValueError):
    """Replay, evaluation or regression input that cannot be used (nothing was recorded
    unless the error says so)."""


class EmptyTrace(EvaluationError):
    """A capture got no events (``eval.*`` / ``replay.*`` / ``regression.*`` do not count)."""


class MixedRunTrace(EvaluationError):
    """A capture got events of more than one run; ``event_id`` is the first stranger."""

    def __init__(self, event_id: str, run_id: str, expected_run_id: str) -> None:
        super().__init__(f"event {event_id} belongs to run {run_id}, not {expected_run_id}")
        self.event_id = event_id
        self.run_id = run_id
        self.expected_run_id = expected_run_id


class FixtureRunMismatch(EvaluationError):
    """``compare(..., check_run_id=True)``: the events are another run's than the fixture's."""

    def __init__(self, fixture_id: str, fixture_run_id: str, actual_run_id: str) -> None:
        super().__init__(f"fixture {fixture_id} was captured from run {fixture_run_id}, "
                         f"not {actual_run_id}")
        self.fixture_id = fixture_id
        self.fixture_run_id = fixture_run_id
        self.actual_run_id = actual_run_id


class InvalidFixture(EvaluationError):
    """A replay fixture file that cannot be read or does not validate."""


class InvalidContract(EvaluationError):
    """An output contract whose schema is not a valid JSON Schema (Draft 2020-12)."""


class InvalidRegressionSpec(EvaluationError):
    """A regression spec that cannot be read or does not validate."""


class NotRecordable(EvaluationError):
    """An event the evaluation recorder must not write: the run lifecycle (``run.*``,
    ``node.*``, ``decision.*``, ``recovery.*``, ``agent.*``) has one writer, the runtime."""


class NotTheLifecycleWriter(SpecError):
    """Run lifecycle events (``run.*``) have one writer: :mod:`hypha_celery.runtime.lifecycle`."""


# -- declarative agents: guards, workflows (FSM), tools, packs, human review -------------
class GuardError(SpecError, ValueError):
    """A guard expression that does not parse or breaks a limit. ``position`` is the
    0-based character offset of the problem (``None``: the whole expression)."""

    def __init__(self, message: str, expression: str = "", position: int | None = None
                 ) -> None:
        where = f" at character {position}" if position is not None else ""
        super().__init__(f"{message}{where}")
        self.expression = expression
        self.position = position


class UnsafeGuardPattern(GuardError):
    """A ``matches(path, 're')`` pattern that is invalid, longer than 128 characters, or
    unsafe: backreferences, lookarounds and nested quantifiers are refused."""


class _Problems:
    """Mixin: an error that lists every problem found as ``(path, message)`` pairs."""

    problems: list[tuple[str, str]]

    @staticmethod
    def text(problems: list[tuple[str, str]]) -> str:
        return "; ".join(f"{path}: {msg}" if path else msg for path, msg in problems)


class WorkflowSpecError(SpecError, _Problems):
    """A workflow that does not compile to an FSM; ``problems`` lists (path, message)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(self.text(problems))
        self.problems = problems


class ToolSpecError(SpecError):
    """A ``ToolSpec`` or tool policy that does not validate (bad schema, level, rule)."""


class McpProfileError(SpecError):
    """An MCP server profile (``McpServer``) that does not validate; the message names the
    field."""


class InvalidPrincipal(SpecError, ValueError):
    """A principal whose role is not ``user`` / ``admin`` or whose id does not validate."""


class InvalidModelRef(SpecError, ValueError):
    """A model reference that is not ``provider:model`` with a known provider and a model
    name; raised where the reference is written (node definition, agent start)."""


class PackError(SpecError, _Problems):
    """A DomainPack that does not load; ``problems`` lists every (path, message)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(self.text(problems))
        self.problems = problems


class TransitionRejected(HyphaRuntimeError):
    """An FSM transition was refused. ``reason`` is one of ``not_allowed``,
    ``guard_rejected``, ``policy_denied``, ``human_review_required``."""

    REASONS = ("not_allowed", "guard_rejected", "policy_denied", "human_review_required")

    def __init__(self, reason: str, source: str, target: str, message: str = "") -> None:
        super().__init__(f"transition {source} -> {target} rejected: {reason}"
                         + (f" ({message})" if message else ""))
        self.reason = reason
        self.source = source
        self.target = target


class ToolCallRejected(HyphaRuntimeError):
    """A governed tool call that did not run (or whose output was refused). ``code`` is
    hypha's: ``TOOL_NOT_ALLOWED_IN_SCOPE``, ``TOOL_INPUT_INVALID``, ``TOOL_POLICY_DENIED``,
    ``TOOL_APPROVAL_REQUIRED``, ``TOOL_APPROVAL_REJECTED``, ``TOOL_OUTPUT_INVALID``, ..."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class McpError(HyphaRuntimeError):
    """An MCP server or tool call failed. ``server`` names the profile; ``error_class`` is
    the class the node's retry policy sees (:func:`hypha_celery.graph.classify`)."""

    error_class = "unknown"

    def __init__(self, server: str, message: str) -> None:
        super().__init__(f"mcp server {server!r}: {message}")
        self.server = server


class McpUnavailable(McpError):
    """The server could not be started or reached, or died (retried as transient).
    ``sent``: False when nothing was asked of the server yet (the session did not open)."""

    error_class = "transient"
    sent = True


class McpTimeout(McpError, TimeoutError):
    """A call took longer than the profile's ``call_timeout``."""

    error_class = "timeout"


class McpOutcomeUnknown(McpError, EffectOutcomeUnknown):
    """A call of a ``write`` / ``external_effect`` / ``irreversible`` tool was lost mid-way
    (the server died or hung): it may have taken effect, so it is never retried; raised from
    a node (:func:`hypha_celery.mcp.call_mcp`), it quarantines the run."""


class McpToolError(McpError):
    """The tool answered with ``isError``: its own failure, not the transport's."""


class McpResultTooLarge(McpError):
    """A tool result past the profile's ``max_result_bytes`` (nothing of it recorded)."""

    error_class = "validation"


class CapabilityQuarantined(McpError):
    """A new or changed MCP capability that no operator accepted (``hypha mcp accept``)."""

    error_class = "policy"


class ReviewError(HyphaRuntimeError):
    """A human review action (approve / reject) that cannot apply."""


class NoPendingReview(ReviewError, LookupError):
    """The run is not waiting for a human review (or not for that one)."""


class BusError(HyphaRuntimeError):
    """A message bus call was refused (:mod:`hypha_celery.bus`); nothing was recorded.
    ``code`` is hypha's error code."""

    code = "MESSAGE_REFUSED"


class MessageScopeMismatch(BusError):
    """A message's ``user_id`` / ``session_id`` differ from its run's, or from the scope
    of the caller acknowledging or failing it."""

    code = "MESSAGE_SCOPE_MISMATCH"


class MessageAlreadyExists(BusError):
    """``publish`` with a message id the bus already holds (in any state)."""

    code = "MESSAGE_ALREADY_EXISTS"


class MessageNotFound(BusError, LookupError):
    """No message by that id (or none the caller's scope may see)."""

    code = "MESSAGE_NOT_FOUND"


class UnknownRecipient(BusError, LookupError):
    """A message to an agent that is not running or to a workflow run that does not
    exist."""

    code = "MESSAGE_UNKNOWN_RECIPIENT"


class MessageTooLarge(TooLarge, BusError):
    """A message's payload and metadata (compact JSON) past
    ``BusLimits.max_message_bytes``; nothing was recorded."""

    code = "MESSAGE_TOO_LARGE"


class QueueFull(Overloaded, BusError):
    """The recipient queue holds ``BusLimits.max_queue_messages`` messages or
    ``max_queue_bytes`` bytes not yet settled; ``info`` says which (GenAgent's overload
    map); nothing was recorded."""

    code = "MESSAGE_QUEUE_FULL"


class HandOffFailed(BusError):
    """A workflow handed work to an agent (``hypha_celery.bus.hand_off``) and got no
    answer: the message was dead-lettered or the reply did not come in time."""

    code = "MESSAGE_HANDOFF_FAILED"


class SkillError(SpecError, ValueError):
    """A ``SKILL.md`` package that does not load. ``path`` names the file, ``field`` the
    front-matter field when there is one."""

    def __init__(self, message: str, *, path: str = "", field: str | None = None) -> None:
        where = f"{path}: " if path else ""
        what = f"{field}: " if field else ""
        super().__init__(f"{where}{what}{message}")
        self.path, self.field = path, field


class SkillNotFound(SkillError, LookupError):
    """A skill id that no registry holds."""


class ContextSpecError(SpecError, ValueError):
    """Context budgets that do not validate."""


class ContextError(HyphaRuntimeError):
    """A context build failed before any inference (``context.build.failed``)."""


class RequiredSkillFailed(ContextError):
    """Required skills did not load; ``failures`` are (skill id, reason) pairs. The text
    is hypha's: ``Required skills failed to load: id (reason), ...``."""

    def __init__(self, failures: list[tuple[str, str]]) -> None:
        listed = ", ".join(f"{skill} ({reason})" for skill, reason in failures)
        super().__init__(f"Required skills failed to load: {listed}")
        self.failures = failures


class BudgetTooSmall(ContextError):
    """The required items of ``source`` need ``needed`` tokens, more than ``budget``."""

    def __init__(self, source: str, needed: int, budget: int) -> None:
        super().__init__(f"the required {source} items need {needed} tokens, more than "
                         f"the budget of {budget}")
        self.source, self.needed, self.budget = source, needed, budget


class GovernedMemoryError(HyphaRuntimeError):
    """A governed memory call was refused; nothing was written. ``code`` is hypha's."""

    code = "MEMORY_REFUSED"


class MemoryScopeRequired(GovernedMemoryError):
    """A memory call without a user scope."""

    code = "MEMORY_SCOPE_REQUIRED"


class MemoryWriteDenied(GovernedMemoryError):
    """The write policy denied the write (``review``: it needs a human review first)."""

    code = "MEMORY_WRITE_DENIED"

    def __init__(self, reason: str, *, review: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.review = reason, review


class MemoryConflict(GovernedMemoryError):
    """An optimistic update lost: the record is at revision ``current``."""

    code = "MEMORY_CONFLICT"

    def __init__(self, record_id: str, expected: int, current: int) -> None:
        super().__init__(f"memory record {record_id} is at revision {current}, not "
                         f"{expected}")
        self.record_id, self.expected, self.current = record_id, expected, current


class MemoryOperationConflict(GovernedMemoryError):
    """A memory write under an operation id a different write used before."""

    code = "MEMORY_OPERATION_CONFLICT"

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"memory operation {operation_id!r} was used before by a "
                         "different write (an operation id names one write)")
        self.operation_id = operation_id


class MemoryNotFound(GovernedMemoryError, LookupError):
    """No record by that id in the caller's scope (another user's looks the same)."""

    code = "MEMORY_NOT_FOUND"


class MemoryRecordTooLarge(TooLarge, GovernedMemoryError):
    """A memory record's body past ``MemoryLimits.max_record_bytes``."""


class InvalidMemoryQuery(GovernedMemoryError, ValueError):
    """A retrieval query that is not valid full-text syntax."""

    code = "MEMORY_QUERY_INVALID"
