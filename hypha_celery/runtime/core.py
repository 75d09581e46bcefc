"""What every task body needs: the Celery app, the store, the graphs, the notifier."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from celery import Celery

from hypha_celery.events import Status, View
from hypha_celery.graph import Graph
from hypha_celery.runtime.lanes import kickoff_id
from hypha_celery.runtime.leases import LeaseKeeper
from hypha_celery.store import EventStore

if TYPE_CHECKING:
    from hypha_celery.client.notifier import Notifier


def awaits(view: View | None, execution_id: str) -> bool:
    """Whether the run is running and waiting for exactly ``execution_id`` (fencing)."""
    return view is not None and view["status"] == Status.RUNNING \
        and view["waiting"] == execution_id


def awaits_coordinator(view: View) -> bool:
    """The run awaits a coordinator message, not a node: its kickoff, or the message
    that resumes it after a human review (its execution id is the review id)."""
    waiting = view["waiting"]
    return waiting is not None and (waiting == kickoff_id(view["run_id"])
                                    or waiting in view["reviews"])


def awaited_task_ids(view: View) -> list[str]:
    """Task ids of the node messages a run awaits (a fan-out: every edge; not the
    reducer, which records the late results of edges that were already running)."""
    waiting = view["waiting"]
    if not waiting or awaits_coordinator(view):  # no node task yet
        return []
    edges = int(view["fanout"] or 0)
    if not edges:
        return [waiting]
    return [f"{waiting}.{i}" for i in range(edges)]


@dataclass
class Runtime:
    app: Celery
    store: EventStore
    notifier: Notifier
    inline_coordinator: bool = True
    local_budget: float = 0.0
    graphs: dict[str, Graph] = field(default_factory=dict)
    delivery_limit: int = 3
    leases: LeaseKeeper = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.leases is None:
            self.leases = LeaseKeeper(self.store)
