"""Lanes: runs sharing ``(user_id, session_id)`` go one at a time, FIFO."""

from __future__ import annotations

import json

from hypha_celery.store import Tx


def lane_key(user_id: str | None, session_id: str | None) -> str | None:
    if user_id is None and session_id is None:
        return None
    return json.dumps([user_id, session_id])


def kickoff_id(run_id: str) -> str:
    return f"{run_id}.0"


def release(tx: Tx, run_id: str, lane: str | None) -> str | None:
    """Called in the transaction that ended ``run_id``: hand the lane to the next
    queued run (appending its ``run.started``) and return that run's id."""
    if lane is None or tx.lane_active(lane) != run_id:
        return None
    for candidate in tx.queued_in_lane(lane):
        view = tx.lock(candidate)
        if view is not None and view["status"] == "queued":
            tx.append(candidate, "run.started", {"execution_id": kickoff_id(candidate)})
            tx.set_lane_active(lane, candidate)
            return candidate
    tx.set_lane_active(lane, None)
    return None
