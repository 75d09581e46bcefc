"""Late results: an execution that finished after its run stopped awaiting it (the run
was cancelled or ended, or the supervisor timed it out) is logged once as
``node.execution.late_result`` and applied nowhere; ``after_late_result`` is told after
the commit that logged it (a duplicate delivery finds it logged and tells nobody)."""

from __future__ import annotations

from collections.abc import Sequence

from hypha_celery.errors import StoreConflict
from hypha_celery.events import RunStatus, View
from hypha_celery.events.payloads import NodeExecutionLateResult
from hypha_celery.middleware import Attempt
from hypha_celery.runtime import seams
from hypha_celery.runtime.core import Runtime, awaits
from hypha_celery.store import Tx

__all__ = ["log_late", "record_late"]

_REASONS = {RunStatus.CANCELLED: "cancelled", RunStatus.RUNNING: "superseded",
            RunStatus.QUARANTINED: "quarantined", RunStatus.PARKED: "parked"}


def log_late(tx: Tx, rt: Runtime, view: View, late: Sequence[Attempt]) -> None:
    """Log each of ``late`` once (a duplicate delivery finds it logged); the reason is
    the run's status, or ``timeout`` when the supervisor stored a timeout for it."""
    reason = _REASONS.get(view["status"], "run_ended")
    for item in late:
        eid = item.execution_id
        done = tx.event_data(f"{eid}:done")
        timed_out = done is not None and (done.get("error") or {}).get("by") == "supervisor"
        if (done is not None and not timed_out) or tx.event_data(f"{eid}:late") is not None:
            continue  # already logged: a duplicate delivery
        _log(tx, rt, item, "timeout" if timed_out else reason)


def record_late(rt: Runtime, late: Attempt, timed_out: bool = False) -> None:
    """An edge finished after its run stopped awaiting the fan-out, or after the
    supervisor stored a timeout outcome for it: log it (once)."""
    try:
        with rt.store.transaction() as tx:
            view = tx.lock(late.run_id)
            if view is None or tx.event_data(f"{late.execution_id}:late") is not None:
                return
            if timed_out:
                _log(tx, rt, late, "timeout")
            elif not awaits(view, late.execution_id.rsplit(".", 1)[0]):
                log_late(tx, rt, view, [late])
    except StoreConflict:
        pass  # the reducer's step logged it at the same moment (and told it)


def _log(tx: Tx, rt: Runtime, late: Attempt, reason: str) -> None:
    tx.emit(late.run_id, NodeExecutionLateResult(execution_id=late.execution_id,
                                                 node_id=late.node, reason=reason),
            idem=f"{late.execution_id}:late")
    seams.late_result(tx, rt, late, reason)
