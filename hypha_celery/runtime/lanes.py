"""Lanes of graph runs: runs sharing ``(user_id, session_id)`` go one at a time, FIFO,
through a :mod:`hypha_celery.lanes` lane (the run id is the item)."""

from __future__ import annotations

import json

from hypha_celery import lanes
from hypha_celery.events import RunStatus
from hypha_celery.events.payloads import RunStarted
from hypha_celery.runtime import lifecycle
from hypha_celery.store import Tx


def lane_key(user_id: str | None, session_id: str | None) -> str | None:
    if user_id is None and session_id is None:
        return None
    return json.dumps([user_id, session_id])


def kickoff_id(run_id: str) -> str:
    return f"{run_id}.0"


def release(tx: Tx, run_id: str, lane: str | None) -> str | None:
    """Called in the transaction that ended ``run_id``: hand the lane to the next
    queued run (appending its ``run.started``) and return that run's id. A queued run
    that ends (cancelled) leaves the lane's FIFO instead."""
    if lane is None:
        return None
    state = lanes.lock(tx, lane)
    if state.active != run_id:
        lanes.remove(tx, lane, run_id)
        return None
    while (item := lanes.pop(tx, lane)) is not None:
        view = tx.lock(item.ref)
        if view is not None and view["status"] == RunStatus.QUEUED:
            lifecycle.emit(tx, item.ref, RunStarted(execution_id=kickoff_id(item.ref)))
            lanes.set_active(tx, lane, item.ref)
            return item.ref
    lanes.set_active(tx, lane, None)
    return None
