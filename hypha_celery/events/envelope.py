"""The event envelope stored in the log and written to JSONL exports."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Kind = Literal[
    "run.created",
    "run.queued",
    "run.started",
    "decision.recorded",
    "node.scheduled",
    "fanout.scheduled",
    "node.started",
    "node.completed",
    "node.failed",
    "node.late_result",
    "reducer.completed",
    "reducer.failed",
    "node.retrying",
    "node.redelivered",
    "node.dead_lettered",
    "recovery.redriven",
    "recovery.timed_out",
    "recovery.reconciled",
    "recovery.exhausted",
    "recovery.circuit_opened",
    "run.quarantined",
    "run.released",
    "run.parked",
    "run.redriven",
    "run.cancel_requested",
    "run.completed",
    "run.failed",
    "run.cancelled",
    # conversational agents (hypha_celery.agents): the stream of one incarnation, whose id
    # is the ``run_id``; content free (ids, origins, reasons; never prompts or state)
    "agent.started",
    "agent.turn.started",
    "agent.turn.completed",
    "agent.turn.failed",
    "agent.turn.late_result",
    "agent.request.cancelled",
    "agent.halted",
    "agent.resumed",
    "agent.draining",
    "agent.stopped",
]

KINDS: frozenset[str] = frozenset(Kind.__args__)  # type: ignore[attr-defined]
AGENT_KINDS: frozenset[str] = frozenset(k for k in KINDS if k.startswith("agent."))
TERMINAL_KINDS: frozenset[str] = frozenset({"run.completed", "run.failed", "run.cancelled"})


class Event(BaseModel):
    """One fact about one run. ``seq`` is unique and gap-free per run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    seq: int
    kind: Kind
    ts: float
    data: dict[str, Any]
