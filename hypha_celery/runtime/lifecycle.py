"""The one writer of run and session lifecycle events (hypha's RunManager).

Every ``run.*`` event — created, queued, started, cancel.requested, parked, quarantined,
released, redriven, waiting_human, completed, failed, cancelled — is appended here, by the
client, the coordinator, the lanes and the supervisor alike. :meth:`Tx.append
<hypha_celery.store.Tx.append>` refuses ``run.*`` from anywhere else
(:class:`~hypha_celery.errors.NotTheLifecycleWriter`), so application and node code
cannot write a run's lifecycle: nodes record facts through their context (model and tool
calls), operators through the supervisor's operations, evaluators through
:func:`hypha_celery.evaluation.record` — never ``run.*``.

What this writer guarantees on top of the store's own rules (gap-free ``seq``, one
terminal event per run through its ``<run>:terminal`` idempotency key): nothing is
appended to a run after its terminal event -- except a session's ``session.updated`` and
``session.closed``, which go to the log of the run that opened the session (where its
``session.created`` is) whether or not that run has ended: they are facts about the
session, and the run's status does not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from hypha_celery.errors import NotTheLifecycleWriter
from hypha_celery.events import TERMINAL_KINDS, TERMINAL_STATUSES, View
from hypha_celery.events.payloads import RunPayload, SessionPayload
from hypha_celery.store import LIFECYCLE_WRITER, Tx

#: The run lifecycle's event types: the ones only this module appends.
RunKind = Literal["run.created", "run.queued", "run.started", "run.cancel.requested",
                  "run.parked", "run.quarantined", "run.suspended", "run.released",
                  "run.redriven",
                  "run.waiting_human", "run.completed", "run.failed", "run.cancelled"]
#: The ones that end a run.
TerminalKind = Literal["run.completed", "run.failed", "run.cancelled"]


#: Session events that may follow the terminal event of the run that opened the session.
_SESSION_LATER = frozenset({"session.updated", "session.closed"})


def emit(tx: Tx, run_id: str, payload: RunPayload | SessionPayload, *,
         idem: str | None = None, ts: float | None = None) -> View:
    """Append the lifecycle event ``payload`` (a ``run.*`` payload model, or a
    ``session.*`` one of the session the run opened) to ``run_id``."""
    _check(tx, run_id, payload.kind)
    return tx.emit(run_id, payload, idem=idem, ts=ts, writer=LIFECYCLE_WRITER)


def record(tx: Tx, run_id: str, kind: RunKind, data: Mapping[str, Any], *,
           idem: str | None = None, ts: float | None = None) -> View:
    """Append the lifecycle event ``kind`` (a ``run.*`` type) with the JSON ``data`` (a
    recorded or imported event: the runtime :func:`emit` s its own)."""
    _check(tx, run_id, kind)
    return tx.append(run_id, kind, data, idem=idem, ts=ts, writer=LIFECYCLE_WRITER)


def _check(tx: Tx, run_id: str, kind: str) -> None:
    if not kind.startswith(("run.", "session.")):
        raise NotTheLifecycleWriter(f"{kind} is not a run or session lifecycle event")
    view = tx.lock(run_id) if kind != "run.created" else None
    if (view is not None and view["status"] in TERMINAL_STATUSES
            and kind not in TERMINAL_KINDS and kind not in _SESSION_LATER):
        raise NotTheLifecycleWriter(f"run {run_id} has ended; {kind} cannot follow")
