"""Graph, Node, the decision context and node outcomes."""

from __future__ import annotations

import copy
import hashlib
import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypedDict, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    TypeAdapter,
    ValidationError,
)

from hypha_celery.backends.llm.ref import ModelRef
from hypha_celery.backends.llm.types import LLMResult, Message
from hypha_celery.errors import GraphSpecError, InvalidCall, InvalidModelRef, MemoryScopeRequired
from hypha_celery.events.payloads import Payload
from hypha_celery.events.view import ErrorJson, FsmPosition, LastOutcome, ReviewDoc, View
from hypha_celery.graph.calls import Calls
from hypha_celery.graph.decisions import DEFAULT_MAX_FANOUT
from hypha_celery.graph.llmcontext import ContextPort, LLMContext
from hypha_celery.graph.memory import MemoryPort, MemoryRefJson, Recalled, Remembered
from hypha_celery.graph.retry import RetryPolicy
from hypha_celery.jsontypes import JsonValue

if TYPE_CHECKING:
    from hypha_celery.backends.llm.client import LLMClient
    from hypha_celery.live import LiveBus

#: ``fn(state, input)`` or ``fn(state, input, ctx)`` -> the state's update (JSON) or None.
NodeFn = Callable[..., Mapping[str, object] | None]
ReceiptFn = Callable[[dict[str, object], JsonValue, "NodeContext"], Mapping[str, object] | None]
SideEffect = Literal["none", "read", "write", "external_effect", "irreversible"]
SIDE_EFFECTS: tuple[str, ...] = get_args(SideEffect)
#: Side-effect levels that run at most once (early ack, never silently re-executed).
AT_MOST_ONCE: frozenset[str] = frozenset({"external_effect", "irreversible"})
ReducerFn = Callable[[dict[str, object], list["Outcome"]], Mapping[str, object]]
PolicyFn = Callable[["Context"], Any]

#: The event families a decision policy may record with its decision (``Context.record``):
#: a workflow's transitions and states, and its states' recovery cases.
POLICY_FACTS = ("fsm.", "recovery.case.")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")

#: Default bound on the JSON size of a run's state (bytes).
DEFAULT_MAX_STATE_BYTES = 1_048_576


def _text(value: object) -> object:
    return value if isinstance(value, str) else str(value)


def _str_or_none(value: object) -> object:
    return value if isinstance(value, str) else None


def _none_if_empty(value: object) -> object:
    return value or None


def _no(value: object) -> bool:
    return not value


#: Text, whatever JSON scalar an error record held (``str()`` of it, as ever).
_Text = Annotated[str, BeforeValidator(_text)]


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """A node / reducer error as data: exception type name, message, and its class
    (``transient``, ``rate_limit``, ``timeout``, ``validation``, ``policy``, ``unknown``;
    ``dead_lettered`` when the message was given up on). Its JSON is an
    :data:`~hypha_celery.events.view.ErrorJson` (``class``: :attr:`error_class`)."""

    type: _Text
    message: _Text = ""
    error_class: Annotated[_Text, Field(alias="class")] = "unknown"
    #: Why the message was dead-lettered (``retries_exhausted``, ``delivery_limit``,
    #: ``recovery_exhausted``), or None; written only when set.
    dead_letter: Annotated[str | None, BeforeValidator(_str_or_none),
                           Field(exclude_if=_no)] = None

    def to_json(self) -> ErrorJson:
        json: ErrorJson = _ERROR.dump_python(self, by_alias=True)
        return json

    @classmethod
    def from_json(cls, data: ErrorJson | Mapping[str, object]) -> ErrorInfo:
        """An error record (other keys, such as ``by``, ignored)."""
        return _ERROR.validate_python(data)


@dataclass(frozen=True, slots=True)
class Outcome:
    """Result of one node execution: ``ok`` with ``value`` or not ok with ``error``."""

    node_id: _Text
    ok: bool
    value: dict[str, object] | None = None
    error: Annotated[ErrorInfo | None, BeforeValidator(_none_if_empty)] = None
    execution_id: _Text = ""

    @classmethod
    def from_json(cls, data: LastOutcome) -> Outcome:
        """The last outcome a run view holds (``ctx.last``)."""
        return _OUTCOME.validate_python(data)


_ERROR = TypeAdapter(ErrorInfo)
_OUTCOME = TypeAdapter(Outcome)


@dataclass(frozen=True, slots=True)
class Context:
    """What a decision policy sees. A copy: changing it changes nothing."""

    run_id: str
    graph_id: str
    step: int
    state: dict[str, object]  # the run state (JSON)
    input: JsonValue
    last: Outcome | None
    user_id: str | None = None
    session_id: str | None = None
    #: The workflow snapshot (``{"workflow", "state", "path"}``) projected from
    #: ``fsm.state.entered`` events; None until a state is entered.
    fsm: FsmPosition | None = None
    #: Human reviews of this run by id: ``{"status": pending|approved|rejected|expired, ...}``.
    reviews: dict[str, ReviewDoc] = field(default_factory=dict)
    #: When the newest event this decision sees was recorded (the projection's
    #: ``updated_at``): a clock that reads the same when the run is re-executed.
    now: float | None = None
    _facts: list[tuple[str, dict[str, object]]] = field(default_factory=list, repr=False,
                                                        compare=False)

    def record(self, kind: str, data: Mapping[str, object]) -> None:
        """Record a fact with this decision, in its transaction: ``fsm.*`` and
        ``recovery.case.*`` events only (a workflow's transitions, entered states and
        recovery cases)."""
        if not kind.startswith(POLICY_FACTS) or not isinstance(data, Mapping):
            raise GraphSpecError(f"a decision policy records only {POLICY_FACTS} events, "
                                 f"not {kind!r}")
        self._facts.append((kind, dict(data)))  # the coordinator checks it is JSON

    def emit(self, payload: Payload) -> None:
        """:meth:`record` the event ``payload`` (a payload model: its type, its JSON)."""
        self.record(payload.kind, payload.dump())

    @property
    def facts(self) -> list[tuple[str, dict[str, object]]]:
        """What :meth:`record` collected (for the coordinator)."""
        return list(self._facts)


class ApprovedReview(TypedDict):
    """The human review approved right before an execution was scheduled
    (:attr:`NodeContext.review`)."""

    review_id: str
    by: str | None


@dataclass(frozen=True, slots=True)
class NodeContext:
    """What a node function may take as its third argument: ids, the attempt
    number, and the cooperative cancellation flag."""

    run_id: str
    execution_id: str
    node_id: str
    attempt: int = 1
    _cancelled: Callable[[], bool] = field(default=lambda: False, repr=False, compare=False)
    _calls: Calls | None = field(default=None, repr=False, compare=False)
    #: The human review approved right before this execution was scheduled
    #: (``{"review_id", "by"}``), if any: what a governed tool's approval step accepts.
    review: ApprovedReview | None = None
    #: The runtime's model client (``ctx.llm``), the live bus its tokens go to, and the
    #: model references the node declared (``Node(models=...)``; None: any).
    _llm: LLMClient | None = field(default=None, repr=False, compare=False)
    _live: LiveBus | None = field(default=None, repr=False, compare=False)
    _models: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    #: The governed memory of the run's user and session (``ctx.recall``), built at the
    #: first memory call; it gives None when the run has no user.
    _memory: Callable[[], MemoryPort | None] | None = field(default=None, repr=False,
                                                            compare=False)
    #: The context builder of ``ctx.llm(..., context=)`` (the runtime's).
    _contexts: ContextPort | None = field(default=None, repr=False, compare=False)

    def cancelled(self) -> bool:
        """True once the run was cancelled (or ended): stop and return early."""
        return self._cancelled()

    def model(self, model: str, call: Callable[[Any], Any], request: Any) -> Any:
        """``call(request)``, recorded as ``model.call.*`` events (the output is stored,
        the request only as a hash). A replay serves the recorded output instead of
        calling. ``request`` and the output must be JSON."""
        return self._recorder().call("model", model, call, request)

    def llm(self, model: str | ModelRef, messages: Sequence[Message],
            tools: Iterable[Any] | None = (), *, step: int | None = None,
            context: LLMContext | None = None, **options: Any) -> LLMResult:
        """Call a model over its provider (``"openai:gpt-4.1-mini"``, ``"anthropic:..."``):
        the answer's text, tool calls and usage. Recorded as ``model.call.*`` events with
        the provider, usage, latency and cost (the request only as a hash; the answer is
        stored, it is what a replay serves); a replay calls nothing. Text deltas stream
        live on ``run:<run_id>``. ``tools``: ``ToolSpec`` s, ``ToolDecl`` s or their JSON
        (``{"id", "description", "input_schema"}``: no side-effect level, the model only
        sees the tools), ``None`` for none; ``options``:
        the provider's (``max_output_tokens``, ``temperature`` ...). Failures raise
        :class:`~hypha_celery.backends.BackendError` (``rate_limited`` and transport or
        server errors are retried by the node's ``RetryPolicy``). A provider's thinking
        is written as ``thinking.started`` / ``thinking.completed`` with its character
        count only (never its text); ``step``: the reasoning step they name (a ReAct
        iteration), None for none. ``context``: build the call's context first
        (:class:`~hypha_celery.graph.llmcontext.LLMContext`: instructions, the user's
        memory, skills, token budgets; ``context.build.*`` events): the built messages
        are what is sent."""
        from hypha_celery.graph.llmcall import call_llm

        ref = ModelRef.parse(model)
        if self._models is not None and str(ref) not in self._models:
            raise InvalidModelRef(f"node {self.node_id!r} calls {str(ref)!r} but declares "
                                  f"models={list(self._models)}")
        if context is not None:
            if self._contexts is None:
                raise InvalidCall("ctx.llm(context=) needs the runtime's context builder "
                                  "(a context built by hand has none)")
            messages = self._contexts(self, ref, messages, context)
        return call_llm(self, self._recorder(), ref, messages, tools, options, step)

    def tool(self, tool: str, call: Callable[[Any], Any], args: Any, *,
             side_effect: SideEffect = "read") -> Any:
        """``call(args)``, recorded as ``tool.call.*`` events with its side-effect level;
        served from the recording in a replay."""
        if side_effect not in SIDE_EFFECTS:
            raise GraphSpecError(f"side_effect must be one of {SIDE_EFFECTS}")
        return self._recorder().call("tool", tool, call, args, {"side_effect": side_effect})

    def recall(self, query: str, *, limit: int = 10,
               memory_types: Sequence[str] | None = None) -> list[Recalled]:
        """The run's user's memory records that match ``query`` (the query language of
        ``docs/memory.md``), best first, at most ``limit``. Recorded as
        ``memory.read.*`` events with the records as ``id@revision`` (never text); a
        replay returns the recorded revisions."""
        port = self._port()
        types = sorted(memory_types) if memory_types else None
        request = {"query": query, "limit": limit, "memory_types": types}
        hits: list[Recalled] = []

        def search(_: object) -> list[MemoryRefJson]:
            hits.extend(port.search(query, limit, types))
            return [{"id": h.id, "revision": h.revision, "score": h.score} for h in hits]

        calls = self._recorder()
        refs = calls.call("memory", "memory.search", search, request,
                          {"scope": port.scope_key, "limit": limit})
        return hits if not calls.replaying else port.read(refs)

    def remember(self, text: str, *, memory_type: str = "episodic",
                 tags: Sequence[str] = ()) -> Remembered:
        """Write a record to the run's user's memory (through the write policy: a denied
        write raises :class:`~hypha_celery.errors.MemoryWriteDenied`). Idempotent: the
        operation id is the execution's n-th write, the same in every attempt, so a retried
        node writes it once (the same text again is reused; another text under that id is
        a ``MemoryOperationConflict``); a re-execution writes nothing. Recorded as
        ``memory.write.*`` events (ids and revision, never text)."""
        port, calls = self._port(), self._recorder()
        # the execution's n-th write: the same in every attempt (a retry writes it once)
        op = f"{self.execution_id}:remember:" + str(sum(
            1 for r in calls.records if r.get("name") == "memory.write"))
        request = {"text_hash": _digest(text), "memory_type": memory_type,
                   "tags": sorted(tags)}

        def write(_: object) -> dict[str, object]:
            done = port.write(text, memory_type, list(tags), op)
            return {"id": done.id, "revision": done.revision, "reused": done.reused}

        out = calls.call("memory", "memory.write", write, request,
                         {"scope": port.scope_key, "memory_type": memory_type})
        return Remembered(str(out["id"]), int(out["revision"]), bool(out["reused"]))

    def _port(self) -> MemoryPort:
        port = self._memory() if self._memory is not None else None
        if port is None:
            if self._calls is not None and self._calls.replaying:
                raise InvalidCall("re-executing a memory call needs the run's memory "
                                  "(give the re-execution a store)")
            raise MemoryScopeRequired(f"run {self.run_id} has no user_id: its nodes have "
                                      "no memory scope")
        return port

    def record(self, kind: str, data: Mapping[str, object]) -> None:
        """Record a fact with the node's outcome (a governed tool's ``tool.*`` steps)."""
        self._recorder().fact(kind, dict(data))

    def emit(self, payload: Payload) -> None:
        """:meth:`record` the event ``payload`` (a payload model: its type, its JSON)."""
        self.record(payload.kind, payload.dump())

    def _recorder(self) -> Calls:
        if self._calls is None:  # a context built by hand (tests): calls go unrecorded
            object.__setattr__(self, "_calls", Calls(self.execution_id, self.node_id))
        assert self._calls is not None
        return self._calls


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_models(models: Iterable[str | ModelRef]) -> tuple[str, ...]:
    if isinstance(models, str | ModelRef):
        models = [models]
    try:
        refs = [str(ModelRef.parse(m)) for m in models]
    except TypeError:
        raise InvalidModelRef("models is a list of 'provider:model' references") from None
    return tuple(dict.fromkeys(refs))


def _takes_ctx(fn: Callable[..., Any]) -> bool:
    """A node function is ``fn(state, input)`` or ``fn(state, input, ctx)``."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3:
        return True
    return any(p.name == "ctx" and p.kind == p.KEYWORD_ONLY for p in params)


class Node:
    """A node function plus its placement and failure semantics::

        Node(fn, queue="gpu", timeout=5.0, retry=RetryPolicy(max_attempts=4))
        Node(send_mail, side_effect="external_effect", receipt=find_sent_mail)

    ``fn(state, input)`` or ``fn(state, input, ctx)`` (a :class:`NodeContext`).
    ``side_effect`` ``"external_effect"`` / ``"irreversible"`` makes the node
    *at most once*: it runs on an early-ack queue, and if its worker dies mid-call
    ``receipt(state, input, ctx)`` tells whether the effect happened (a dict: its
    update; ``None``: it did not) — without one the run is quarantined for a human.
    ``dependency`` names the circuit breaker the node's failures count against
    (default: the node's own task name). ``models`` declares the model references the
    node calls through ``ctx.llm`` (``["openai:gpt-4.1-mini"]``): checked here (an
    unknown provider raises ``InvalidModelRef``), the only ones ``ctx.llm`` accepts, and
    the node runs on the I/O queue (``hypha.io``: a thread-pool worker) unless ``queue``
    says otherwise.
    """

    __slots__ = ("dependency", "fn", "models", "queue", "receipt", "retry", "side_effect",
                 "takes_ctx", "timeout")

    def __init__(
        self, fn: NodeFn, *, queue: str | None = None, timeout: float | None = None,
        retry: RetryPolicy | None = None, side_effect: SideEffect = "none",
        receipt: ReceiptFn | None = None, dependency: str | None = None,
        models: Iterable[str | ModelRef] = (),
    ) -> None:
        if not callable(fn):
            raise GraphSpecError(f"node function must be callable, got {type(fn).__name__}")
        if timeout is not None and not timeout > 0:
            raise GraphSpecError("node timeout must be > 0")
        if queue is not None and not queue:
            raise GraphSpecError("node queue must be a non-empty string")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise GraphSpecError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        if side_effect not in SIDE_EFFECTS:
            raise GraphSpecError(f"side_effect must be one of {list(SIDE_EFFECTS)}, "
                                 f"got {side_effect!r}")
        if receipt is not None and (not callable(receipt) or side_effect not in AT_MOST_ONCE):
            raise GraphSpecError("receipt= needs a callable and side_effect="
                                 "'external_effect' or 'irreversible'")
        if dependency is not None and not (isinstance(dependency, str) and dependency):
            raise GraphSpecError("dependency must be a non-empty string")
        self.fn = fn
        self.queue = queue
        self.timeout = timeout
        self.retry = retry
        self.side_effect = side_effect
        self.receipt = receipt
        self.dependency = dependency
        self.models = _check_models(models)
        self.takes_ctx = _takes_ctx(fn)

    @property
    def at_most_once(self) -> bool:
        return self.side_effect in AT_MOST_ONCE


class _Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int = Field(default=25, gt=0)
    execution_timeout: float = Field(default=300.0, gt=0)
    node_timeout: float = Field(default=60.0, gt=0)
    max_state_bytes: int = Field(default=DEFAULT_MAX_STATE_BYTES, gt=0)
    max_fanout: StrictInt = Field(default=DEFAULT_MAX_FANOUT, gt=0)
    on_node_error: Literal["fail", "policy"] = "fail"
    on_dead_letter: Literal["fail", "park"] = "fail"


class Graph:
    """A graph agent: named nodes, reducers and a deterministic decision policy.

    Everything is validated here, at definition time; an invalid graph raises
    :class:`~hypha_celery.errors.GraphSpecError` and is never registered.
    ``on_node_error="fail"`` (default) ends the run when a node fails;
    ``"policy"`` hands the failed outcome to the policy in ``ctx.last``.
    ``max_fanout`` bounds a ``FanOut``'s edges (default 256, see
    :data:`~hypha_celery.graph.decisions.DEFAULT_MAX_FANOUT`): a wider one ends the run
    ``run.failed`` ``fanout_too_wide``.

    ``retry`` is the default :class:`RetryPolicy` of nodes without their own (none:
    no retries). A message delivered more than the delivery limit
    (``HYPHA_DELIVERY_LIMIT``, default 3) times without
    completing (it kills its worker every time), or whose retries are exhausted, is
    *dead-lettered*; when the policy does not handle it, ``on_dead_letter="fail"``
    (default) ends the run ``dead_lettered`` and ``"park"`` holds the run until
    ``hypha dlq redrive`` re-enqueues the message.
    """

    def __init__(
        self,
        id: str,
        nodes: Mapping[str, NodeFn | Node],
        decision_policy: PolicyFn,
        reducers: Mapping[str, ReducerFn] | None = None,
        *,
        max_steps: int = 25,
        execution_timeout: float = 300.0,
        node_timeout: float = 60.0,
        max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
        max_fanout: int = DEFAULT_MAX_FANOUT,
        on_node_error: Literal["fail", "policy"] = "fail",
        retry: RetryPolicy | None = None,
        on_dead_letter: Literal["fail", "park"] = "fail",
    ) -> None:
        _check_name("graph id", id)
        self.id = id
        self.nodes = _check_nodes(nodes)
        self.reducers = _check_reducers(reducers or {}, self.nodes)
        if not callable(decision_policy):
            raise GraphSpecError("decision_policy must be callable: fn(ctx) -> Next|FanOut|Finish")
        self.decision_policy = decision_policy
        try:
            limits = _Limits(
                max_steps=max_steps,
                execution_timeout=execution_timeout,
                node_timeout=node_timeout,
                max_state_bytes=max_state_bytes,
                max_fanout=max_fanout,
                on_node_error=on_node_error,
                on_dead_letter=on_dead_letter,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            raise GraphSpecError(
                f"graph {id!r}: {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from None
        self.max_steps = limits.max_steps
        self.execution_timeout = limits.execution_timeout
        self.node_timeout = limits.node_timeout
        self.max_state_bytes = limits.max_state_bytes
        self.max_fanout = limits.max_fanout
        self.on_node_error = limits.on_node_error
        self.on_dead_letter = limits.on_dead_letter
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise GraphSpecError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        self.retry = retry

    def retry_for(self, node_id: str) -> RetryPolicy | None:
        node = self.nodes.get(node_id)
        return node.retry if node is not None and node.retry is not None else self.retry

    def dependency_for(self, node_id: str, provider: str | None = None) -> str:
        """The circuit breaker key of ``node_id``: its ``dependency`` when it names one,
        else its task name, per model provider when ``provider`` is given
        (``support.classify:openai``)."""
        node = self.nodes[node_id]
        if node.dependency:
            return node.dependency
        return f"{self.id}.{node_id}" if provider is None else f"{self.id}.{node_id}:{provider}"

    def failure_dependency(self, node_id: str, calls: Sequence[Mapping[str, object]] | None
                           ) -> str:
        """The key a failed attempt counts against: its failed model call's provider's
        when the attempt's last call (``calls``: what it recorded) is a ``ctx.llm`` call
        that failed, else the node's own."""
        last = calls[-1] if calls else None
        provider = last.get("provider") if last is not None and "error" in last else None
        return self.dependency_for(node_id, provider if isinstance(provider, str) else None)

    def dependencies_of(self, node_id: str,
                        calls: Sequence[Mapping[str, object]] | None = None) -> tuple[str, ...]:
        """Every key of ``node_id``: its own, then one per provider, those of the model
        calls in ``calls`` that completed (what a successful attempt closes), else of the
        models it declares (what the supervisor checks before re-driving it)."""
        if calls is None:
            providers = [ModelRef.parse(m).provider for m in self.nodes[node_id].models]
        else:
            providers = [p for c in calls
                         if "error" not in c and isinstance(p := c.get("provider"), str)]
        keys = [self.dependency_for(node_id), *(self.dependency_for(node_id, p)
                                                for p in providers)]
        return tuple(dict.fromkeys(keys))

    def timeout_for(self, node_id: str) -> float:
        node = self.nodes[node_id]
        return node.timeout if node.timeout is not None else self.node_timeout

    def context(self, view: View) -> Context:
        """Build the policy's context from a run projection (deep-copied)."""
        last = view.get("last")
        return Context(
            run_id=view["run_id"],
            graph_id=self.id,
            step=int(view["step"]),
            state=copy.deepcopy(view["state"]),
            input=copy.deepcopy(view["input"]),
            last=Outcome.from_json(last) if last else None,
            user_id=view.get("user_id"),
            session_id=view.get("session_id"),
            fsm=copy.deepcopy(view.get("fsm")),
            reviews=copy.deepcopy(view.get("reviews") or {}),
            now=view.get("updated_at"),
        )

    def __repr__(self) -> str:
        return f"Graph(id={self.id!r}, nodes={list(self.nodes)}, reducers={list(self.reducers)})"


def _check_name(what: str, name: object) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise GraphSpecError(
            f"{what} must match {_NAME.pattern} (letters, digits, _ and -), got {name!r}"
        )


def _check_nodes(nodes: Mapping[str, NodeFn | Node]) -> dict[str, Node]:
    if not isinstance(nodes, Mapping) or not nodes:
        raise GraphSpecError("a graph needs at least one node: nodes={'id': fn}")
    checked: dict[str, Node] = {}
    for node_id, spec in nodes.items():
        _check_name("node id", node_id)
        checked[node_id] = spec if isinstance(spec, Node) else Node(spec)
    return checked


def _check_reducers(
    reducers: Mapping[str, ReducerFn], nodes: Mapping[str, Node]
) -> dict[str, ReducerFn]:
    for name, fn in reducers.items():
        _check_name("reducer name", name)
        if name in nodes:
            raise GraphSpecError(f"reducer {name!r} has the same name as a node")
        if not callable(fn):
            raise GraphSpecError(f"reducer {name!r} must be callable: fn(state, outcomes) -> dict")
    return dict(reducers)
