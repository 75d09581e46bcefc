"""What every task body needs: the Celery app, the store, the graphs, the notifier."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from celery import Celery

from hypha_celery.graph import Graph
from hypha_celery.store import EventStore

if TYPE_CHECKING:
    from hypha_celery.client.notifier import Notifier


@dataclass
class Runtime:
    app: Celery
    store: EventStore
    notifier: Notifier
    inline_coordinator: bool = True
    local_budget: float = 0.0
    graphs: dict[str, Graph] = field(default_factory=dict)
