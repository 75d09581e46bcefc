"""``recovery_cases``: a run's recovery cases (``recovery.case.*``) as audit data — each
case's state, node, fingerprint, status and every cycle with its strategy and evidence
hash. Error messages stay out (only an error's type and class)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from hypha_celery.events import payloads as ev
from hypha_celery.events.cases import fold_case
from hypha_celery.events.envelope import Event
from hypha_celery.events.status import CaseStatus
from hypha_celery.events.view import CaseDoc

__all__ = ["AuditCase", "AuditCaseCycle", "recovery_cases"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditCaseCycle(_Frozen):
    """One ``recovery.case.attempted``: the strategy, its attempt, where it went, the
    evidence hash of the failure it answered, whether that was progress, and why."""

    seq: int
    cycle: int
    strategy: str
    attempt: int
    target: str
    evidence: str
    progress: bool
    reason: str


class AuditCase(_Frozen):
    """One recovery case as its events fold it."""

    case_id: str
    state: str
    node: str
    status: CaseStatus
    fingerprint: str
    opened_seq: int
    cycles: tuple[AuditCaseCycle, ...] = ()
    compensated: tuple[str, ...] = ()
    reason: str | None = None
    #: A failed compensation's error type and class.
    error: tuple[str, str] | None = None


def recovery_cases(trace: Sequence[Event]) -> tuple[AuditCase, ...]:
    """The run's cases in the order they opened."""
    docs: dict[str, CaseDoc] = {}
    opened: dict[str, int] = {}
    cycles: dict[str, list[AuditCaseCycle]] = {}
    errors: dict[str, tuple[str, str]] = {}
    for e in trace:
        if not e.type.startswith("recovery.case."):
            continue
        body = e.body
        case_id = str(getattr(body, "case_id", ""))
        docs_case = fold_case(docs.get(case_id), body)
        if docs_case is None:
            continue
        docs[case_id] = docs_case
        opened.setdefault(case_id, e.seq)
        if isinstance(body, ev.RecoveryCaseAttempted):
            cycles.setdefault(case_id, []).append(_cycle(e.seq, body))
        if isinstance(body, ev.RecoveryCaseEscalated) and body.error:
            errors[case_id] = (str(body.error.get("type")), str(body.error.get("class")))
    return tuple(_case(doc, opened[cid], cycles.get(cid, []), errors.get(cid))
                 for cid, doc in docs.items())


def _cycle(seq: int, p: ev.RecoveryCaseAttempted) -> AuditCaseCycle:
    return AuditCaseCycle(seq=seq, cycle=p.cycle, strategy=p.strategy, attempt=p.attempt,
                          target=p.target, evidence=p.evidence, progress=p.progress,
                          reason=p.reason)


def _case(doc: CaseDoc, seq: int, cycles: list[AuditCaseCycle],
          error: tuple[str, str] | None) -> AuditCase:
    return AuditCase(case_id=doc["case_id"], state=doc["state"], node=doc["node"],
                     status=CaseStatus(doc["status"]), fingerprint=doc["fingerprint"],
                     opened_seq=seq, cycles=tuple(cycles), compensated=tuple(doc["compensated"]),
                     reason=doc["reason"], error=error)
