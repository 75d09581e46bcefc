"""Fold events into the run projection.

The store maintains the projection with exactly this function inside the
append transaction, and ``rebuild`` runs it over the log: the two cannot
diverge except through a bug, and a test compares them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

View = dict[str, Any]
_Handler = Callable[[View, Mapping[str, Any]], None]


def new_view(run_id: str) -> View:
    return {
        "run_id": run_id,
        "graph_id": None,
        "status": "new",
        "user_id": None,
        "session_id": None,
        "lane": None,
        "input": None,
        "state": {},
        "step": 0,
        "waiting": None,
        "waiting_nodes": [],
        "last": None,
        "result": None,
        "error": None,
        "deadline": None,
        "max_steps": None,
        "notify": None,
        "idempotency_key": None,
        "cancel_requested": False,
        "created_at": None,
        "updated_at": None,
    }


def _created(v: View, d: Mapping[str, Any]) -> None:
    for key in ("graph_id", "user_id", "session_id", "lane", "input", "deadline", "max_steps",
                "notify", "idempotency_key"):
        v[key] = d.get(key)
    v["status"] = "queued"


def _started(v: View, d: Mapping[str, Any]) -> None:
    v["status"] = "running"
    v["waiting"] = d["execution_id"]
    v["waiting_nodes"] = []


def _scheduled(v: View, d: Mapping[str, Any]) -> None:
    v["step"] = d["step"]
    v["waiting"] = d["execution_id"]
    v["waiting_nodes"] = [d["node_id"]]


def _fanout(v: View, d: Mapping[str, Any]) -> None:
    v["step"] = d["step"]
    v["waiting"] = d["execution_id"]
    v["waiting_nodes"] = [e["node_id"] for e in d["edges"]]


def _outcome(v: View, d: Mapping[str, Any]) -> None:
    if d.get("edge_of"):
        return  # edge outcomes reach the state only through the reducer
    ok = "error" not in d
    name = d.get("node_id") or d.get("reducer")
    if ok:
        v["state"].update(d["update"])
    v["last"] = {
        "node_id": name,
        "execution_id": d["execution_id"],
        "ok": ok,
        "value": d.get("update") if ok else None,
        "error": d.get("error"),
    }
    v["waiting"] = None
    v["waiting_nodes"] = []


def _cancel_requested(v: View, d: Mapping[str, Any]) -> None:
    v["cancel_requested"] = True


def _terminal(status: str) -> _Handler:
    def handler(v: View, d: Mapping[str, Any]) -> None:
        v["status"] = status
        v["waiting"] = None
        v["waiting_nodes"] = []
        if status == "completed":
            v["result"] = d.get("result")
        else:
            v["error"] = {"reason": d.get("reason", status), "message": d.get("message", "")}

    return handler


def _nothing(v: View, d: Mapping[str, Any]) -> None:
    return None


_HANDLERS: dict[str, _Handler] = {
    "run.created": _created,
    "run.queued": _nothing,
    "run.started": _started,
    "decision.recorded": _nothing,
    "node.scheduled": _scheduled,
    "fanout.scheduled": _fanout,
    "node.started": _nothing,
    "node.completed": _outcome,
    "node.failed": _outcome,
    "node.late_result": _nothing,
    "reducer.completed": _outcome,
    "reducer.failed": _outcome,
    "run.cancel_requested": _cancel_requested,
    "run.completed": _terminal("completed"),
    "run.failed": _terminal("failed"),
    "run.cancelled": _terminal("cancelled"),
}

#: Kinds that leave the projection document unchanged (only ``seq`` moves).
PASSIVE_KINDS = frozenset(k for k, h in _HANDLERS.items() if h is _nothing)


def apply_event(view: View, kind: str, data: Mapping[str, Any], ts: float) -> None:
    """Apply one event to ``view`` in place."""
    _HANDLERS[kind](view, data)
    if view["created_at"] is None:
        view["created_at"] = ts
    view["updated_at"] = ts


def fold(run_id: str, events: Iterable[tuple[str, Mapping[str, Any], float]]) -> View:
    """Rebuild a run projection from ``(kind, data, ts)`` triples, oldest first."""
    view = new_view(run_id)
    for kind, data, ts in events:
        apply_event(view, kind, data, ts)
    return view
