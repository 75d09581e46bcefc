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
]

KINDS: frozenset[str] = frozenset(Kind.__args__)  # type: ignore[attr-defined]
TERMINAL_KINDS: frozenset[str] = frozenset({"run.completed", "run.failed", "run.cancelled"})


class Event(BaseModel):
    """One fact about one run. ``seq`` is unique and gap-free per run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    seq: int
    kind: Kind
    ts: float
    data: dict[str, Any]
