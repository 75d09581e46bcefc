"""A workflow state's recovery case: a failure's fingerprint and evidence hash, and the
plan of the next cycle (hypha's ``runRecoverySupervisor`` convergence rules).

The plan is a pure function of the case (the fold of its ``recovery.case.*`` events,
:func:`~hypha_celery.events.cases.fold_case`), the state's :class:`StateRecovery`, the
failure and the clock. Rules, first match wins:

1. an invariant violation (an error type naming ``Invariant`` or ``Corrupt``) quarantines;
2. a ``validation`` or ``policy`` error escalates at once (no strategy fixes bad input);
3. past ``max_elapsed`` seconds since the case opened, or ``max_cycles`` cycles, escalate;
4. the first cycle takes the first strategy;
5. ``max_no_progress_cycles`` failures in a row with the same fingerprint and evidence
   hash, or ``max_same_strategy`` attempts of the strategy, move to the next strategy;
6. else the same strategy again. ``escalate`` next escalates with the reason of the move
   (``no_progress``, ``max_same_strategy``); no strategy left: ``strategies_exhausted``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

from hypha_celery.events.view import CaseDoc
from hypha_celery.fsm.spec import StateRecovery
from hypha_celery.graph import ErrorInfo

__all__ = ["Failure", "Plan", "RecoveryAction", "evidence_hash", "plan"]

_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
#: Bound on the error message kept in the evidence (characters).
MAX_EVIDENCE_MESSAGE = 500


def evidence_hash(evidence: dict[str, object]) -> str:
    """hypha's evidence hash: FNV-1a (64-bit here, 16 hex digits) over the key-sorted JSON
    of ``evidence`` without its ``observed_at``. The same failure hashes the same in every
    process and run."""
    text = json.dumps({k: v for k, v in evidence.items() if k != "observed_at"},
                      sort_keys=True, separators=(",", ":"), default=str)
    h = _FNV64_OFFSET
    for byte in text.encode():
        h = ((h ^ byte) * _FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


@dataclass(frozen=True, slots=True)
class Failure:
    """A node's failure in a workflow state: what a case is about."""

    state: str
    node: str
    error: ErrorInfo

    @property
    def fingerprint(self) -> str:
        """``<state>:<node>:<error type>:<error class>``: the same kind of failure."""
        return f"{self.state}:{self.node}:{self.error.type}:{self.error.error_class}"

    @property
    def evidence(self) -> str:
        """The hash of the fingerprint and what the failure said."""
        return evidence_hash({"fingerprint": self.fingerprint,
                              "message": self.error.message[:MAX_EVIDENCE_MESSAGE],
                              "dead_letter": self.error.dead_letter})

    @property
    def invariant(self) -> bool:
        name = self.error.type.upper()
        return "INVARIANT" in name or "CORRUPT" in name


class RecoveryAction(StrEnum):
    """What a cycle does: one of the strategies, or quarantine."""

    RETRY = "retry"
    FALLBACK = "fallback"
    DEGRADE = "degrade"
    ESCALATE = "escalate"
    QUARANTINE = "quarantine"


@dataclass(frozen=True, slots=True)
class Plan:
    """The next cycle: ``action``, its ``attempt`` (1 for a strategy taken now), why."""

    action: RecoveryAction
    reason: str
    attempt: int = 1


def plan(case: CaseDoc, rec: StateRecovery, failure: Failure, now: float,
         progress: bool) -> Plan:
    """The next cycle of ``case`` after ``failure`` (``progress``: its evidence hash
    differs from the failure before it)."""
    if failure.invariant:
        return Plan(RecoveryAction.QUARANTINE, "invariant_violation")
    if failure.error.error_class in ("validation", "policy"):
        return Plan(RecoveryAction.ESCALATE, f"not_retryable:{failure.error.error_class}")
    if now - case["opened_at"] > rec.max_elapsed:
        return Plan(RecoveryAction.ESCALATE, "max_elapsed")
    if case["cycles"] >= rec.max_cycles:
        return Plan(RecoveryAction.ESCALATE, "max_cycles")
    order = [RecoveryAction(s.value) for s in rec.strategies]
    current = case["strategy"]
    if current is None:
        return _take(order, 0, "first")
    at = order.index(RecoveryAction(current))
    if not progress and case["no_progress"] + 1 >= rec.max_no_progress_cycles:
        return _take(order, at + 1, "no_progress")
    if case["attempts"] >= rec.max_same_strategy:
        return _take(order, at + 1, "max_same_strategy")
    return Plan(order[at], "again", case["attempts"] + 1)


def _take(order: list[RecoveryAction], index: int, reason: str) -> Plan:
    if index >= len(order):
        return Plan(RecoveryAction.ESCALATE, "strategies_exhausted")
    if order[index] == RecoveryAction.ESCALATE and reason == "first":
        return Plan(RecoveryAction.ESCALATE, "escalate")  # the state's only strategy
    return Plan(order[index], reason)
