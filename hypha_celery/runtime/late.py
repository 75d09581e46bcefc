"""Late results: an execution that finished after its run stopped awaiting it (the run
was cancelled or ended, or the supervisor timed it out) is logged once as
``node.execution.late_result`` and applied nowhere."""

from __future__ import annotations

from collections.abc import Sequence

from hypha_celery.errors import StoreConflict
from hypha_celery.events import Status, View
from hypha_celery.runtime.core import Runtime, awaits
from hypha_celery.store import Tx

__all__ = ["LateItem", "log_late", "record_late"]

#: What a late result is known by: its execution id and its node (or reducer).
LateItem = tuple[str, str]

_REASONS = {Status.CANCELLED: "cancelled", Status.RUNNING: "superseded",
            Status.QUARANTINED: "quarantined", Status.PARKED: "parked"}


def log_late(tx: Tx, view: View, late: Sequence[LateItem]) -> None:
    """Log each of ``late`` once (a duplicate delivery finds it logged); the reason is
    the run's status, or ``timeout`` when the supervisor stored a timeout for it."""
    reason = _REASONS.get(view["status"], "run_ended")
    for eid, node_id in late:
        done = tx.recorded(f"{eid}:done")
        timed_out = done is not None and (done.get("error") or {}).get("by") == "supervisor"
        if (done is not None and not timed_out) or tx.recorded(f"{eid}:late") is not None:
            continue  # already logged: a duplicate delivery
        tx.append(view["run_id"], "node.execution.late_result",
                  {"execution_id": eid, "node_id": node_id,
                   "reason": "timeout" if timed_out else reason}, idem=f"{eid}:late")


def record_late(rt: Runtime, run_id: str, execution_id: str, node_id: str,
                timed_out: bool = False) -> None:
    """An edge finished after its run stopped awaiting the fan-out, or after the
    supervisor stored a timeout outcome for it: log it (once)."""
    try:
        with rt.store.transaction() as tx:
            view = tx.lock(run_id)
            if view is None or tx.recorded(f"{execution_id}:late") is not None:
                return
            if timed_out:
                tx.append(run_id, "node.execution.late_result",
                          {"execution_id": execution_id, "node_id": node_id,
                           "reason": "timeout"}, idem=f"{execution_id}:late")
            elif not awaits(view, execution_id.rsplit(".", 1)[0]):
                log_late(tx, view, [(execution_id, node_id)])
    except StoreConflict:
        pass  # the reducer's step logged it at the same moment
