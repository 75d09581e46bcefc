"""Building one run's events by hand: ``(kind, payload)`` pairs, seq from 1, a tick apart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypha_celery.events import Event
from hypha_celery.events.fold import fold
from hypha_celery.runtime import lifecycle
from hypha_celery.store import Tx

RUN = "r1"
SECRET = "sk-secret-prompt-text"

Step = tuple[str, dict[str, Any]]


def created(graph_id: str = "g", user_id: str | None = None, session_id: str | None = None,
            **extra: Any) -> Step:
    return ("run.created", {"graph_id": graph_id, "input": {"question": SECRET},
                            "user_id": user_id, "session_id": session_id, "lane": None,
                            "deadline": None, "max_steps": None, "notify": None,
                            "idempotency_key": None, **extra})


def started(run_id: str = RUN) -> Step:
    return ("run.started", {"execution_id": f"{run_id}.0"})


def scheduled(node_id: str, step: int, run_id: str = RUN) -> Step:
    return ("node.execution.scheduled", {"execution_id": f"{run_id}.{step}", "node_id": node_id,
                                         "input": {"q": SECRET}, "step": step})


def completed(node_id: str, step: int, run_id: str = RUN) -> Step:
    return ("node.execution.completed", {"execution_id": f"{run_id}.{step}",
                                         "node_id": node_id, "update": {node_id: SECRET},
                                         "duration": 0.01})


def events(steps: Sequence[Step], run_id: str = RUN, t0: float = 100.0, tick: float = 0.5,
           **envelope: Any) -> list[Event]:
    """Envelopes ``seq`` 1.. at ``t0``, ``t0 + tick``, ...; ``envelope`` sets fields such
    as ``step_id`` on every event."""
    return [Event(run_id=run_id, seq=i, type=kind,  # type: ignore[arg-type]
                  timestamp=t0 + (i - 1) * tick, payload=payload, **envelope)
            for i, (kind, payload) in enumerate(steps, start=1)]


def append(tx: Tx, run_id: str, kind: str, data: dict[str, Any], ts: float | None = None
           ) -> None:
    """Append as the runtime does: ``run.*`` through the lifecycle writer."""
    if kind.startswith("run."):
        lifecycle.record(tx, run_id, kind, data, ts=ts)
    else:
        tx.append(run_id, kind, data, ts=ts)


def folded_status(evs: Sequence[Event]) -> str:
    """The status the store's projection (``fold``) gives the same events."""
    return str(fold(evs[0].run_id, ((e.kind, e.data, e.ts) for e in evs))["status"])
