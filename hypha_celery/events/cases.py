"""The fold of a workflow state's recovery case: ``recovery.case.*`` events in, a
:class:`~hypha_celery.events.view.CaseDoc` out. The store's projection keeps a run's last
case in ``fsm["case"]`` with it; the workflow policy folds the events it records in a
decision the same way (:func:`fold_case`), so the two agree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypha_celery.events.payloads import (
    Payload,
    RecoveryCaseAttempted,
    RecoveryCaseCompensated,
    RecoveryCaseCompensationStarted,
    RecoveryCaseEscalated,
    RecoveryCaseOpened,
    RecoveryCaseQuarantined,
    RecoveryCaseResolved,
)
from hypha_celery.events.status import CaseStatus
from hypha_celery.events.view import CaseDoc

__all__ = ["CASE_PAYLOADS", "fold_case"]


def _opened(case: CaseDoc | None, p: RecoveryCaseOpened) -> CaseDoc:
    return {"case_id": p.case_id, "state": p.state, "node": p.node,
            "status": CaseStatus.OPEN.value, "opened_at": p.at, "fingerprint": p.fingerprint,
            "evidence": p.evidence, "cycles": 0, "strategy": None, "attempts": 0,
            "no_progress": 0, "tried": [], "compensating": None, "compensated": [],
            "reason": None}


def _attempted(case: CaseDoc, p: RecoveryCaseAttempted) -> CaseDoc:
    return {**case, "cycles": p.cycle, "strategy": p.strategy, "attempts": p.attempt,
            "fingerprint": p.fingerprint, "evidence": p.evidence,
            "no_progress": 0 if p.progress or p.strategy != case["strategy"]
            else case["no_progress"] + 1,
            "tried": case["tried"] if p.strategy in case["tried"]
            else [*case["tried"], p.strategy]}


def _compensating(case: CaseDoc, p: RecoveryCaseCompensationStarted) -> CaseDoc:
    return {**case, "status": CaseStatus.COMPENSATING.value, "compensating": p.compensates,
            "reason": p.reason}


def _compensated(case: CaseDoc, p: RecoveryCaseCompensated) -> CaseDoc:
    return {**case, "compensating": None, "compensated": [*case["compensated"], p.compensates]}


def _quarantined(case: CaseDoc, p: RecoveryCaseQuarantined) -> CaseDoc:
    return {**case, "status": CaseStatus.QUARANTINED.value, "reason": p.reason,
            "evidence": p.evidence}


def _resolved(case: CaseDoc, p: RecoveryCaseResolved) -> CaseDoc:
    return {**case, "status": p.status, "reason": p.strategy}


def _escalated(case: CaseDoc, p: RecoveryCaseEscalated) -> CaseDoc:
    return {**case, "status": CaseStatus.ESCALATED.value, "reason": p.reason,
            "compensating": None}


_Fold = Callable[[Any, Any], CaseDoc]
#: The fold of each case payload model.
_CASE_FOLDS: dict[type[Payload], _Fold] = {
    RecoveryCaseOpened: _opened, RecoveryCaseAttempted: _attempted,
    RecoveryCaseCompensationStarted: _compensating, RecoveryCaseCompensated: _compensated,
    RecoveryCaseQuarantined: _quarantined, RecoveryCaseResolved: _resolved,
    RecoveryCaseEscalated: _escalated}
#: The payload models of the ``recovery.case.*`` family.
CASE_PAYLOADS: tuple[type[Payload], ...] = tuple(_CASE_FOLDS)


def fold_case(case: CaseDoc | None, payload: Payload) -> CaseDoc | None:
    """``case`` after ``payload`` (a ``recovery.case.*`` payload): opened starts a new
    case; any other event of another case (or with none open) leaves it as it is."""
    fold = _CASE_FOLDS[type(payload)]
    if isinstance(payload, RecoveryCaseOpened):
        return fold(case, payload)
    if case is None or case["case_id"] != getattr(payload, "case_id", None):
        return case
    return fold(case, payload)
