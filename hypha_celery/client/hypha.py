"""``Hypha``: register graphs, start runs, observe them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from functools import partial
from typing import Any, Literal

from celery import Celery
from celery.canvas import Signature

from hypha_celery import bus as message_bus
from hypha_celery import lanes
from hypha_celery.agents import recovery as agent_recovery
from hypha_celery.agents import tasks as agent_tasks
from hypha_celery.agents.api import Agents
from hypha_celery.agents.channels import Transport
from hypha_celery.agents.runtime import AgentRuntime
from hypha_celery.agents.telemetry import Telemetry
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.backends.llm.ratelimit import Limiter, MemoryLimiter, RedisLimiter
from hypha_celery.beat import operator, supervisor
from hypha_celery.client.run import RunHandle
from hypha_celery.client.scoped import ScopedHypha
from hypha_celery.client.sessions import (
    SessionOpening,
    check_opening,
    close_session,
    refuse_closed,
    update_session,
)
from hypha_celery.embedded import EmbeddedWorker
from hypha_celery.errors import (
    BrokerUnavailable,
    FailureReason,
    GraphSpecError,
    InputTooLarge,
    InvalidNotify,
    InvalidPrincipal,
    LaneBusy,
    Overloaded,
    RunNotFound,
    SpecError,
    StoreConflict,
    UnknownGraph,
)
from hypha_celery.events import TERMINAL_STATUSES, new_view
from hypha_celery.events import payloads as ev
from hypha_celery.graph import Graph
from hypha_celery.graph.jsonsafe import is_json, json_size_or_none
from hypha_celery.jsontypes import JsonObject
from hypha_celery.live import LiveBus, MemoryLiveBus, NullBus, RedisLiveBus
from hypha_celery.memory import MemoryManager
from hypha_celery.middleware import Middleware, MiddlewareStack
from hypha_celery.middleware import _celery_signals as celery_signals
from hypha_celery.principals import Principal
from hypha_celery.reviews import PendingReview
from hypha_celery.reviews import approve as approve_review
from hypha_celery.reviews import pending as pending_reviews
from hypha_celery.reviews import reject as reject_review
from hypha_celery.runtime import canvas, consumer, lifecycle, rabbit, seams, signing, tasks
from hypha_celery.runtime.config import (
    AGENTS_QUEUE,
    COORDINATOR_QUEUE,
    EFFECTS_QUEUE,
    IO_QUEUE,
    NODES_QUEUE,
    Settings,
    celery_config,
)
from hypha_celery.runtime.coordinator import local_limit, terminal
from hypha_celery.runtime.core import Runtime, SweepDecision, awaited_task_ids
from hypha_celery.runtime.lanes import kickoff_id, lane_key
from hypha_celery.runtime.leases import LeaseMiddleware
from hypha_celery.runtime.live import LiveEnds
from hypha_celery.runtime.notifier import LocalNotifier, Notifier, RedisNotifier
from hypha_celery.runtime.retries import Retries
from hypha_celery.runtime.tls import redis_client_url
from hypha_celery.store import EventStore, SessionRow, Tx

OnBusy = Literal["queue", "reject"]


def new_run_id() -> str:
    """Module-level so tests can make ids deterministic."""
    return uuid.uuid4().hex


class Hypha:
    """One hypha application: a Celery app, an event store and registered graphs.

    ``Hypha.from_env()`` reads ``HYPHA_BROKER_URL``, ``HYPHA_RESULT_BACKEND`` and
    ``HYPHA_STORE_URL``; with no broker it is *embedded*: an in-process worker
    thread on the memory transport and a SQLite store under ``./.hypha/``.

    ``middleware``: the hooks of runs, steps, node attempts, their model and tool calls
    and agent turns (:mod:`hypha_celery.middleware`), after the built-in ones (retries,
    leases, the agents' telemetry, the ends of live streams). A worker runs the hooks of
    the ``Hypha`` its app module builds: pass the same list there.

    ``live``: where token streams go (:class:`~hypha_celery.live.LiveBus`); by default
    Redis pub/sub when the app has Redis, in-process when embedded, else nowhere.

    ``llm``: the model client of ``ctx.llm`` (:class:`~hypha_celery.backends.llm.client.
    LLMClient`); by default one built from the ``model_*`` settings, its rate limits kept
    in Redis when the app has Redis (shared by every worker), in the process otherwise.
    """

    def __init__(self, settings: Settings, *, name: str = "hypha",
                 middleware: Iterable[Middleware] = (), live: LiveBus | None = None,
                 llm: LLMClient | None = None) -> None:
        self.settings = settings
        self.celery = Celery(name)
        self.celery.config_from_object(celery_config(settings))
        signing.apply(self.celery, settings.signing)  # HYPHA_SIGNING_*: sign and verify
        self.store = EventStore(settings.store_url)
        consumer.bind(self.celery, self.store, settings.max_message_bytes)
        self.notifier: Notifier = _notifier(settings)
        #: Live token streams (``RunHandle.stream``, ``agents.stream``): never stored.
        self.live: LiveBus = _live(settings) if live is None else live
        #: The model client of ``ctx.llm`` (closed with the app when built here).
        self.llm: LLMClient = _llm(settings) if llm is None else llm
        self._owns_llm = llm is None
        self._rt = Runtime(self.celery, self.store, self.notifier, settings.inline_coordinator,
                           settings.local_budget if settings.inline_coordinator else 0.0,
                           delivery_limit=settings.delivery_limit,
                           lease_interval=settings.lease_interval,
                           middleware=_stack(self.store, settings, middleware, self.live),
                           live=self.live, llm=self.llm)
        celery_signals.bind(self.celery, self._rt.middleware)  # process and publish hooks
        tasks.register_coordinator(self._rt)
        supervisor.register(self._rt)
        self._embedded: EmbeddedWorker | None = None
        self._memory: MemoryManager | None = None
        self.agents = _agents(self)
        #: The message bus between agents, workflows and humans (``docs/bus.md``).
        self.bus = _bus(self)

    @property
    def memory(self) -> MemoryManager:
        """Governed memory on this app's store, any user's (``docs/memory.md``); a user's
        client has its own (``hypha.as_user(u).memory``)."""
        if self._memory is None:
            self._memory = MemoryManager(self.store)
        return self._memory

    @classmethod
    def from_env(cls, **overrides: Any) -> Hypha:
        return cls(Settings.from_env(), **overrides)

    # -- graphs ------------------------------------------------------------
    @property
    def graphs(self) -> dict[str, Graph]:
        return dict(self._rt.graphs)

    def register(self, graph: Graph) -> Graph:
        """Register ``graph``: one Celery task per node (``graph.node``) and reducer."""
        if not isinstance(graph, Graph):
            raise GraphSpecError(f"register() takes a Graph, got {type(graph).__name__}")
        known = self._rt.graphs.get(graph.id)
        if known is graph:
            return graph
        if known is not None:
            raise GraphSpecError(f"a different graph {graph.id!r} is already registered")
        _check_visibility(graph, self.settings)
        tasks.register_graph(self._rt, graph)
        self._declare_queues(graph)
        self._rt.graphs[graph.id] = graph
        if self._embedded is not None:
            self._embedded.refresh(sorted(self.queues()))
        return graph

    def _declare_queues(self, graph: Graph) -> None:
        """On RabbitMQ a node's own queue is a dead-lettered quorum queue too."""
        if not rabbit.is_amqp(self.settings.broker_url):
            return
        limit = self.settings.broker_delivery_limit
        known = {q.name for q in self.celery.amqp.queues.values()}
        for name in sorted({n.queue for n in graph.nodes.values() if n.queue} - known):
            rabbit.declare_queue(self.celery, name, limit)

    def _graph(self, graph: Graph | str) -> Graph:
        graph_id = graph.id if isinstance(graph, Graph) else graph
        found = self._rt.graphs.get(graph_id)
        if found is None:
            raise UnknownGraph(f"no graph {graph_id!r} is registered (known: "
                               f"{', '.join(sorted(self._rt.graphs)) or 'none'})")
        return found

    # -- runs --------------------------------------------------------------
    def start(
        self,
        graph: Graph | str,
        input: Any = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        notify: Signature | None = None,
        on_busy: OnBusy = "queue",
        idempotency_key: str | None = None,
        session: SessionOpening | None = None,
    ) -> RunHandle:
        """Record ``run.created`` and enqueue the coordinator; returns at once.

        The first run with a ``session_id`` opens the session ``(user_id, session_id)``
        (``session.created``, with ``session``'s profile and metadata: :class:`SessionOpening`);
        later runs of the session ignore ``session``.

        Runs with the same ``(user_id, session_id)`` go one at a time, FIFO;
        ``on_busy="reject"`` raises :class:`LaneBusy` instead of queueing; a lane whose
        pending runs would pass ``Settings.lane_bound`` (count / input bytes) raises
        :class:`Overloaded` and records nothing; an input larger than
        ``Settings.max_input_bytes`` raises :class:`InputTooLarge` and records nothing.
        """
        g = self._graph(graph)
        _check_start_args(notify, on_busy)
        opening = check_opening(session, session_id)
        size = json_size_or_none(input)  # the one encoding that checks and measures it
        if size is None:
            raise SpecError("run input must be JSON-serializable")
        if size > self.settings.max_input_bytes:
            raise InputTooLarge(size, self.settings.max_input_bytes)
        if idempotency_key is not None:
            existing = self.store.find_idempotent(idempotency_key)
            if existing is not None:
                return RunHandle(self, existing)
        run_id = new_run_id()
        created = ev.RunCreated(graph_id=g.id, input=input, user_id=user_id,
                             session_id=session_id, lane=lane_key(user_id, session_id),
                             max_steps=g.max_steps,
                             notify=dict(notify) if notify is not None else None,
                             idempotency_key=idempotency_key)
        try:
            started = self._create(run_id, created, g.execution_timeout, on_busy, size,
                                   opening)
        except StoreConflict:
            if idempotency_key is None:
                raise
            existing = self.store.find_idempotent(idempotency_key)
            if existing is None:
                raise
            return RunHandle(self, existing)
        if started:
            self._kickoff(run_id, g)
        self._ensure_worker()
        return RunHandle(self, run_id)

    def _kickoff(self, run_id: str, graph: Graph) -> None:
        try:
            canvas.kickoff(self.celery, run_id, kickoff_id(run_id),
                           local_limit(graph, self._rt.local_budget))
        except Exception as exc:  # kombu raises OperationalError and socket errors
            with self.store.transaction() as tx:
                view = tx.lock(run_id)
                if view is not None and view["status"] == "running":
                    terminal(tx, self._rt, view, ev.RunFailed(
                        reason=FailureReason.ENQUEUE_FAILED.value,
                        message=f"broker unavailable: {type(exc).__name__}"))
            raise BrokerUnavailable(
                f"broker unavailable: could not enqueue run {run_id} ({type(exc).__name__}); "
                "it was recorded as run.failed (enqueue_failed)"
            ) from None

    def _create(self, run_id: str, created: ev.RunCreated, execution_timeout: float,
                on_busy: OnBusy, size: int, opening: SessionOpening) -> bool:
        lane = created.lane
        with self.store.transaction() as tx:
            # Stamped once the transaction holds a ready schema: the deadline is
            # run.created's time + execution_timeout, never minus a first migration.
            at = time.time()
            created = created.model_copy(update={"deadline": at + execution_timeout})
            tx.create(new_view(run_id))
            lifecycle.emit(tx, run_id, created, ts=at)
            _open_session(tx, run_id, created, opening)
            active = lanes.lock(tx, lane).active if lane is not None else None
            if lane is not None and active is not None:
                if on_busy == "reject":
                    raise LaneBusy(lane, active)
                refused = lanes.push(tx, lane, run_id, size, bound=self.settings.lane_bound,
                                     queue="runs")
                if refused is not None:
                    raise Overloaded(refused)
                lifecycle.emit(tx, run_id, ev.RunQueued(behind=active))
                seams.run_started(tx, self._rt, run_id, created.graph_id, queued=True)
                return False
            if lane is not None:
                lanes.set_active(tx, lane, run_id)
            lifecycle.emit(tx, run_id, ev.RunStarted(execution_id=kickoff_id(run_id)))
            seams.run_started(tx, self._rt, run_id, created.graph_id, queued=False)
        return True

    # -- sessions ------------------------------------------------------------
    def sessions(self, *, user_id: str | None = None, limit: int = 50) -> list[SessionRow]:
        """The newest sessions first (of ``user_id`` if given), with their run counts."""
        return self.store.sessions(user_id=user_id, limit=limit)

    def session(self, session_id: str, user_id: str | None = None) -> SessionRow | None:
        """The session ``(user_id, session_id)``; None if no run opened it."""
        return self.store.session(user_id, session_id)

    def close_session(self, session_id: str, user_id: str | None = None, *,
                      reason: str | None = None) -> SessionRow | None:
        """Close the session (``session.closed``; once): its status is ``closed`` and a
        run started in it is :class:`~hypha_celery.errors.SessionClosed`. The session as
        it is now; None if there is no such session."""
        return close_session(self.store, user_id, session_id, reason=reason)

    def update_session(self, session_id: str, metadata: JsonObject,
                       user_id: str | None = None) -> SessionRow | None:
        """Merge ``metadata`` into the session's, the caller winning key by key
        (``session.updated``); None if there is no such session."""
        return update_session(self.store, user_id, session_id, metadata)

    def get_run(self, run_id: str) -> RunHandle:
        if self.store.load(run_id) is None:
            raise RunNotFound(f"no run {run_id!r} in the event store")
        return RunHandle(self, run_id)

    def cancel(self, run_id: str) -> bool:
        """End the run ``run.cancelled`` now (one commit), revoke its queued node tasks
        and raise ``ctx.cancelled()`` for node code; a result arriving later is stale."""
        return self.cancel_in(self.store, run_id)

    def cancel_in(self, store: EventStore, run_id: str) -> bool:
        """:meth:`cancel` through ``store`` (a scoped store finds only its owner's runs)."""
        with store.transaction() as tx:
            view = tx.lock(run_id)
            if view is None:
                raise RunNotFound(f"no run {run_id!r} in the event store")
            if view["status"] in TERMINAL_STATUSES:
                return False
            awaited = awaited_task_ids(view)
            lifecycle.emit(tx, run_id, ev.RunCancelRequested(revoked=awaited))
            terminal(tx, self._rt, view, ev.RunCancelled(reason="cancelled",
                                                           message="cancelled by request"))
            tx.after_commit(lambda: canvas.revoke(self.celery, awaited))
        return True

    # -- principals ----------------------------------------------------------
    def as_user(self, user_id: str) -> ScopedHypha:
        """A client acting for user ``user_id``: it starts runs as that user and reads,
        waits on, streams, cancels, exports, reviews and redrives only that user's runs,
        sessions, agents, reviews and dead letters (see :class:`ScopedHypha`). This
        ``Hypha`` itself stays unscoped: the trusted, single-tenant view."""
        return ScopedHypha(self, Principal.user(user_id))

    def as_principal(self, principal: Principal) -> ScopedHypha:
        """A client acting for ``principal`` (a user, or an admin who sees everything and
        is named in the events of what it does)."""
        if not isinstance(principal, Principal):
            raise InvalidPrincipal(f"as_principal() takes a Principal, got "
                                   f"{type(principal).__name__}")
        return ScopedHypha(self, principal)

    # -- operators: dead letters, quarantine, the supervisor ---------------
    def sweep(self) -> list[SweepDecision]:
        """Run one recovery-supervisor sweep now; returns its decisions."""
        return supervisor.sweep(self._rt)

    def redrive(self, dead_letter_id: int, *, by: str | None = None) -> str:
        """Re-enqueue a dead-lettered message; a parked run continues. ``by`` (who
        acted) goes into the run's event."""
        self._ensure_worker()
        return operator.redrive(self._rt, dead_letter_id, by)

    def release(self, run_id: str, *, by: str | None = None) -> None:
        """A human checked a quarantined run's effect did not happen: run the node again."""
        self._ensure_worker()
        operator.release(self._rt, run_id, by)

    # -- human review ------------------------------------------------------
    def reviews(self, limit: int = 100) -> list[PendingReview]:
        """Runs waiting for a human (``PendingReview``), oldest first."""
        return pending_reviews(self.store, limit)

    def approve(self, run_id: str, *, by: str, note: str = "",
                review_id: str | None = None) -> str:
        """Approve the run's pending review: the policy runs again and the run goes on.
        :class:`NoPendingReview` if it is not waiting for one."""
        self._ensure_worker()
        return approve_review(self._rt, run_id, by=by, note=note, review_id=review_id)

    def reject(self, run_id: str, *, by: str, reason: str,
               review_id: str | None = None) -> str:
        """Reject the run's pending review (a workflow then ends ``review_rejected``)."""
        self._ensure_worker()
        return reject_review(self._rt, run_id, by=by, reason=reason, review_id=review_id)

    def fail_quarantined(self, run_id: str, message: str = "failed by an operator", *,
                         by: str | None = None) -> None:
        """End a quarantined run ``run.failed`` (reason ``quarantined``)."""
        operator.fail_quarantined(self._rt, run_id, message, by)

    # -- workers -----------------------------------------------------------
    def _ensure_worker(self) -> None:
        if self.settings.embedded:
            self.start_embedded_worker()

    def start_embedded_worker(self) -> None:
        if self._embedded is None:
            queues = sorted(self.queues())
            self._embedded = EmbeddedWorker(self.celery, queues,
                                            self.settings.embedded_concurrency)
        self._embedded.start()

    def queues(self) -> set[str]:
        """Every queue this app's tasks are routed to."""
        # never hypha.dead_letter
        names = {COORDINATOR_QUEUE, NODES_QUEUE, EFFECTS_QUEUE, AGENTS_QUEUE, IO_QUEUE}
        for g in self._rt.graphs.values():
            names.update(n.queue for n in g.nodes.values() if n.queue)
        return names

    def close(self) -> None:
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None
        self.agents.close()
        self.notifier.close()
        self.live.close()
        if self._owns_llm:
            self.llm.close()
        self.store.dispose()


def _check_start_args(notify: Any, on_busy: str) -> None:
    if notify is not None and not isinstance(notify, Signature):
        raise InvalidNotify(
            f"notify must be a Celery signature (task.s(...)), got {type(notify).__name__}"
        )
    if notify is not None and not is_json(dict(notify)):
        raise InvalidNotify("notify signature arguments must be JSON-serializable")
    if on_busy not in ("queue", "reject"):
        raise SpecError(f"on_busy must be 'queue' or 'reject', got {on_busy!r}")


def _check_visibility(graph: Graph, settings: Settings) -> None:
    """An unacked message is redelivered after the visibility timeout: every node's
    hard time limit plus its longest retry delay must fit inside it."""
    for node_id in graph.nodes:
        retry = graph.retry_for(node_id)
        need = canvas.hard_limit(graph.timeout_for(node_id) + settings.local_budget) + (
            retry.max_backoff if retry else 0.0)
        if need >= settings.visibility_timeout:
            raise GraphSpecError(
                f"node {graph.id}.{node_id} needs {need:.0f}s (hard time limit + retry delay) "
                f"but HYPHA_VISIBILITY_TIMEOUT is {settings.visibility_timeout:.0f}s: "
                "raise it or lower the node timeout")


def _redis_url(settings: Settings) -> str | None:
    """hypha's own Redis clients' URL (``rediss://``: with the TLS files in its query)."""
    if settings.embedded:
        return None
    for url in (settings.result_backend, settings.broker_url):
        if url.startswith(("redis://", "rediss://")):
            return redis_client_url(url, settings.tls)
    return None


def _notifier(settings: Settings) -> Notifier:
    url = _redis_url(settings)
    return LocalNotifier() if url is None else RedisNotifier(url)


def _live(settings: Settings) -> LiveBus:
    """In-process when embedded, Redis pub/sub when the app has Redis, else none."""
    if settings.embedded:
        return MemoryLiveBus()
    url = _redis_url(settings)
    return NullBus() if url is None else RedisLiveBus(url)


def _llm(settings: Settings) -> LLMClient:
    """The model client from the settings: rate limits in Redis when the app has Redis
    (every worker shares them), else in this process."""
    url = _redis_url(settings)
    limiter: Limiter = MemoryLimiter(settings.model_limits) if url is None \
        else RedisLimiter(url, settings.model_limits)
    return LLMClient(limiter=limiter, prices=settings.model_prices,
                     base_urls=settings.model_base_urls, max_wait=settings.model_max_wait)


def _stack(store: EventStore, settings: Settings, middleware: Iterable[Middleware],
           live: LiveBus) -> MiddlewareStack:
    """The built-ins, then the user's: retries (they decide last what becomes of a
    failed attempt: ``after_*`` hooks run in reverse), the lease middleware (unless
    ``HYPHA_LEASE_INTERVAL`` is 0), the agents' telemetry (its content-free turn
    events) and the ends of live streams (unless there is no live bus), so one stack
    serves runs, steps, node attempts and turns."""
    leases = [LeaseMiddleware(store, settings.lease_interval)] \
        if settings.lease_interval > 0 else []
    ends = [] if isinstance(live, NullBus) else [LiveEnds(live)]
    return MiddlewareStack([Retries(store), *leases, Telemetry(), *ends, *middleware])


def _bus(hypha: Hypha) -> message_bus.Bus:
    """The bus on the app's store; a message to an idle agent is handed to it by the
    publish itself, others wake ``hypha.bus.deliver`` on the agents' queue; the
    supervisor re-sends lost wake-ups."""
    wake = message_bus.celery_waker(hypha.celery, hypha._ensure_worker)
    bounds = hypha.settings.bus  # HYPHA_BUS_*
    bus = message_bus.Bus(hypha.store, wake=wake,
                          retry=message_bus.RetryPolicy.from_settings(bounds),
                          limits=message_bus.BusLimits.from_settings(bounds))
    bus.direct[message_bus.EndpointKind.AGENT] = message_bus.direct(bus, hypha.agents)
    bus.wakers.append(message_bus.resumer(bus, hypha._rt))  # replies to parked workflows
    message_bus.register(bus, hypha.agents, hypha.celery)
    hypha._rt.sweeps.append(partial(message_bus.sweep, bus, wake))
    return bus


def _agents(hypha: Hypha) -> Agents:
    rt = AgentRuntime(hypha.celery, hypha.store, Transport(hypha.celery, _redis_url(
        hypha.settings)), hypha.notifier, hypha.settings.lease_interval,
        middleware=hypha._rt.middleware, live=hypha.live, services=hypha.llm.services)
    agent_tasks.register(rt)
    hypha._rt.sweeps.append(partial(agent_recovery.sweep, rt))  # the supervisor's part
    return Agents(rt, ensure_worker=hypha._ensure_worker)


def _open_session(tx: Tx, run_id: str, created: ev.RunCreated, opening: SessionOpening) -> None:
    """Open the run's session if it is the session's first run (``session.created``)."""
    session_id = created.session_id
    if session_id is None:
        return
    refuse_closed(tx, created.user_id, session_id)
    at = time.time()  # created_at is the event's time: an import rebuilds it
    if tx.open_session(created.user_id, session_id, run_id=run_id, profile=opening.profile,
                       pack=opening.pack, metadata=opening.metadata, at=at):
        lifecycle.emit(tx, run_id, ev.SessionCreated(
            session_id=session_id, user_id=created.user_id, profile=opening.profile,
            pack=opening.pack, metadata=opening.metadata), ts=at)
