"""What every task body needs: the Celery app, the store, the graphs, the notifier, the
middleware, the live bus — the :class:`Runtime`, the one registry of a process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NotRequired, Protocol, TypedDict, final

from celery import Celery

from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.events import RunStatus, View
from hypha_celery.graph import Graph
from hypha_celery.live import LiveBus, NullBus
from hypha_celery.memory import MemoryManager
from hypha_celery.middleware import EMPTY, MiddlewareStack
from hypha_celery.runtime.lanes import kickoff_id
from hypha_celery.runtime.leases import DEFAULT_INTERVAL
from hypha_celery.runtime.notifier import Notifier
from hypha_celery.store import EventStore


def awaits(view: View | None, execution_id: str) -> bool:
    """Whether the run is running and waiting for exactly ``execution_id`` (fencing)."""
    return view is not None and view["status"] == RunStatus.RUNNING \
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


@final
class RunSweepDecision(TypedDict):
    """What the recovery supervisor did to a run (ids and the action only): ``redriven``
    (``why``: ``worker_lost``, ``not_started`` ...), ``timed_out``, ``quarantined``,
    ``reconciled``, ``circuit_open``, ``review_expired``, ``dead_lettered`` (``run_id``
    None for a message of no run), ``error`` (``why``: the exception's type) ..."""

    run_id: str | None
    action: str
    execution_id: str | None
    why: NotRequired[str]


@final
class AgentSweepDecision(TypedDict):
    """What the agents' sweep did: ``agent_redriven`` (``why``: ``owner_lost`` /
    ``never_taken``), ``completion_resent`` (``ref``: the request's) or ``bus_rewoken``
    (a bus message waits for the agent: its wake-up was sent again)."""

    agent: str
    action: Literal["agent_redriven", "completion_resent", "bus_rewoken"]
    why: NotRequired[str]
    ref: NotRequired[str]


#: One decision of a recovery sweep (:func:`hypha_celery.beat.supervisor.sweep`).
SweepDecision = RunSweepDecision | AgentSweepDecision


class Sweep(Protocol):
    """A recovery sweep the supervisor runs after the runs' own (the agents' is one):
    returns its decisions."""

    def __call__(self, now: float, grace: float, kickoff_lease: float, limit: int
                 ) -> list[AgentSweepDecision]: ...


@dataclass
class Runtime:
    """The one registry of a process (worker or client): built once by
    :class:`~hypha_celery.Hypha` and bound into every task it registers (task bodies are
    closures over it). Nothing is stored on the Celery app.

    ``middleware`` is the stack every hook call site uses (the lease middleware first);
    ``sweeps`` are the extra recovery sweeps (the agents') the supervisor runs;
    ``lease_interval`` is the heartbeat interval the supervisor judges leases by;
    ``live`` is where model calls publish their tokens (topic ``run:<run_id>``, see
    :mod:`hypha_celery.live`): Redis pub/sub when the app has Redis, in-process when
    embedded, nowhere otherwise; ``llm`` is the model client of ``ctx.llm`` (rate
    limits, prices, base URLs)."""

    app: Celery
    store: EventStore
    notifier: Notifier
    inline_coordinator: bool = True
    local_budget: float = 0.0
    graphs: dict[str, Graph] = field(default_factory=dict)
    delivery_limit: int = 3
    lease_interval: float = DEFAULT_INTERVAL
    middleware: MiddlewareStack = EMPTY
    sweeps: list[Sweep] = field(default_factory=list)
    live: LiveBus = field(default_factory=NullBus)
    llm: LLMClient = field(default_factory=LLMClient)
    #: Governed memory on ``store`` (``ctx.recall`` / ``ctx.remember``): built at first
    #: use with the default write policy unless given.
    memory: MemoryManager | None = None

    def memory_manager(self) -> MemoryManager:
        if self.memory is None:
            self.memory = MemoryManager(self.store)
        return self.memory
