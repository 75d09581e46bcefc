"""What each middleware hook is told: small frozen records of ids, names and reasons.

They carry no node input or output, no prompt and no state: a middleware sees what an
operator may see (the same rule as events and Flower)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True, slots=True)
class RunStart:
    """A run was admitted (``run.started``, or ``run.queued`` when its lane was busy)."""

    run_id: str
    graph_id: str
    queued: bool = False


@dataclass(frozen=True, slots=True)
class RunEnd:
    """A run's one terminal event was committed."""

    run_id: str
    status: str
    reason: str | None = None
    #: The run's graph (for metrics by graph); records compare without it.
    graph_id: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Step:
    """One coordinator step of a run: recording the awaited outcome and deciding."""

    run_id: str
    execution_id: str


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a node (or fan-out edge) execution on a worker."""

    run_id: str
    execution_id: str
    node: str
    attempt: int


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How an attempt ended: ``ok``, or the error's type name (never its message)."""

    ok: bool
    error_type: str | None = None
    duration_s: float = 0.0


class RetryRule(Protocol):
    """What a retry decision reads of a node's retry policy
    (:class:`~hypha_celery.graph.RetryPolicy` is one)."""

    @property
    def retry_on(self) -> tuple[str, ...]: ...
    def retries(self, error_class: str, attempt: int) -> bool: ...
    def delay(self, execution_id: str, attempt: int) -> float: ...


class Settling(Protocol):
    """A finished node attempt before the runtime hands its outcome on
    (``after_attempt_outcome``): a middleware may change what becomes of it, as
    dramatiq's ``Retries`` does: :meth:`retry` it, or :meth:`dead_letter` it. Told once
    per attempt that ran (not for a stale one), in the worker, after ``after_attempt``.

    ``error`` is the attempt's error record (``type``, ``class``, ``message``; ``None``:
    it succeeded), ``late`` that it ran past its timeout (never retried), ``decided``
    that a middleware (or the delivery limit) already retried or dead-lettered it,
    ``retry_policy`` the node's, ``dependency`` the circuit breaker key a failure counts
    against (the node's, per model provider when a ``ctx.llm`` call failed), and
    ``dependencies`` every key a success closes (the node's and its calls' providers')."""

    @property
    def attempt(self) -> Attempt: ...
    @property
    def error(self) -> Mapping[str, Any] | None: ...
    @property
    def late(self) -> bool: ...
    @property
    def decided(self) -> bool: ...
    @property
    def retry_policy(self) -> RetryRule | None: ...
    @property
    def dependency(self) -> str: ...
    @property
    def dependencies(self) -> tuple[str, ...]: ...

    def retry(self, delay: float, circuit: tuple[str, float] | None = None) -> None:
        """Try again after ``delay`` s: ``node.execution.retrying`` (and, with
        ``circuit`` ``(key, until)``, ``recovery.circuit.opened``) is recorded with what
        the attempt did, then the next attempt is published (a duplicate delivery that
        finds the retry recorded publishes nothing)."""

    def dead_letter(self, reason: str) -> None:
        """Hand the attempt on as a dead letter (``reason``: ``retries_exhausted``...):
        the coordinator records it and fails the run."""


@dataclass(frozen=True, slots=True)
class Publish:
    """A task message being published by a process of the app (a node, edge, reducer,
    coordinator, retry, notify or agent message): its task name, id and routing key.
    ``headers`` are the message's own: ``before_publish`` may add to them (a trace
    context); never the message's body."""

    task: str
    task_id: str | None
    routing_key: str | None
    headers: dict[str, Any] = field(compare=False, default_factory=dict)


@dataclass(frozen=True, slots=True)
class Process:
    """A worker process: its ``pid``, ``child`` when it is a prefork pool child (else
    the worker's main process), and the ``queues`` the worker consumes (main process
    only)."""

    pid: int
    child: bool = False
    queues: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Call:
    """One model, tool or memory call a node made through its context (``ctx.model``,
    ``ctx.llm``, ``ctx.tool``, ``ctx.recall``, ``ctx.remember``), in the node's thread:
    ``name`` is the model reference (``openai:gpt-4.1-mini``), the tool's name or
    ``memory.search`` / ``memory.write``, ``call_id`` the id its ``model.call.*`` /
    ``tool.call.*`` events carry (a memory call's: the ``operation_id`` of its
    ``memory.*`` events). A replay serves recorded calls: no hook is called."""

    run_id: str
    execution_id: str
    node_id: str
    kind: Literal["model", "tool", "memory"]
    name: str
    call_id: str


@dataclass(frozen=True, slots=True)
class CallEnd:
    """How a call ended: ``error_type`` ``None`` for a return, else the exception's type
    name (never its message); token counts when the call reported them (``ctx.llm``),
    else ``None``; ``error_kind`` a failed model call's ``BackendError`` kind
    (``rate_limited``, ``incomplete_stream`` ...; ``None`` for another exception)."""

    duration_s: float
    error_type: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    error_kind: str | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """One attempt of a conversational agent's turn."""

    agent: str
    ref: str
    attempt: int
    origin: str


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """How a turn attempt ended: ``reason_kind`` is ``None`` for a stop, else the error's
    kind (``timeout``, ``interrupted``, ``task_crashed``, ``backend_or_callback_error``)."""

    duration_ms: float
    reason_kind: str | None = None


@dataclass(frozen=True, slots=True)
class Sweep:
    """One recovery supervisor sweep (the ``hypha.supervisor`` task) and what it decided."""

    duration_s: float
    decisions: int
