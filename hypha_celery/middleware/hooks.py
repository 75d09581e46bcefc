"""What each middleware hook is told: small frozen records of ids, names and reasons.

They carry no node input or output, no prompt and no state: a middleware sees what an
operator may see (the same rule as events and Flower)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


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


@dataclass(frozen=True, slots=True)
class Call:
    """One model or tool call a node made through its context (``ctx.model``, ``ctx.llm``,
    ``ctx.tool``), in the node's thread: ``name`` is the model reference
    (``openai:gpt-4.1-mini``) or the tool's name, ``call_id`` the id its ``model.call.*`` /
    ``tool.call.*`` events carry. A replay serves recorded calls: no hook is called."""

    run_id: str
    execution_id: str
    node_id: str
    kind: Literal["model", "tool"]
    name: str
    call_id: str


@dataclass(frozen=True, slots=True)
class CallEnd:
    """How a call ended: ``error_type`` ``None`` for a return, else the exception's type
    name (never its message); token counts when the call reported them (``ctx.llm``),
    else ``None``."""

    duration_s: float
    error_type: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


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
