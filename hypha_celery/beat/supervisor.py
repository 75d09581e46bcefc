"""The recovery supervisor: one sweep finds runs with no progress past their lease
and re-drives, times out, fails, reconciles or quarantines them.

Run by celery beat (task ``hypha.supervisor``, one beat instance) or by hand
(``hypha sweep``). Each decision is taken in a transaction on the locked run row
that re-checks the run has not moved since the sweep read it, and is recorded
as an event (``recovery.*``, ``run.quarantined``, ``run.failed``), so a
duplicate sweep is harmless. The sweep query uses the status index only: it
adds nothing to a step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypha_celery.beat import singleton
from hypha_celery.errors import FailureReason
from hypha_celery.events import View
from hypha_celery.events import payloads as ev
from hypha_celery.graph import Graph, NodeContext
from hypha_celery.middleware import Sweep
from hypha_celery.reviews import expire_due
from hypha_celery.runtime import canvas, failures, lifecycle, rabbit, seams
from hypha_celery.runtime.attempts import scheduled_message
from hypha_celery.runtime.config import SUPERVISOR_TASK
from hypha_celery.runtime.coordinator import (
    coordinate,
    fanout_calls,
    node_call,
    publish_fanout,
    resume,
    step_locked,
    terminal,
)
from hypha_celery.runtime.core import (
    AgentSweepDecision,
    RunSweepDecision,
    Runtime,
    SweepDecision,
    awaited_task_ids,
    awaits_coordinator,
)
from hypha_celery.runtime.leases import alive
from hypha_celery.runtime.nodes import effect_key
from hypha_celery.runtime.protocol import (
    ErrorJson,
    NodeMessage,
    NodeOutcome,
    ReducerOutcome,
)
from hypha_celery.store import Tx
from hypha_celery.store import bus as bus_rows
from hypha_celery.store.recovery import LeaseRow

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryPolicy:
    """Bounds of recovery (seconds and counts)."""

    #: Added to a node's hard time limit before the supervisor acts.
    grace: float = 10.0
    #: A kickoff not picked up within this long is published again.
    kickoff_lease: float = 30.0
    #: Re-drives of one execution before it is dead-lettered (``recovery_exhausted``).
    max_redrives: int = 3
    #: The lease grows by this factor per re-drive (backoff).
    backoff: float = 2.0
    #: Runs examined per sweep.
    limit: int = 200
    #: Seconds a sweep may spend deciding (a decision costs 4-8 ms on PostgreSQL); what is
    #: left waits for the next sweep, oldest first.
    budget: float = 0.75
    #: Lease rows whose heartbeat is older than this are deleted.
    lease_retention: float = 3600.0


DEFAULT_POLICY = RecoveryPolicy()


def register(rt: Runtime) -> None:
    """Register the ``hypha.supervisor`` task (celery beat sends it) on ``rt.app``."""

    def supervisor() -> None:
        sweep(rt)

    rt.app.task(name=SUPERVISOR_TASK, ignore_result=True, shared=False)(supervisor)


def sweep(rt: Runtime, now: float | None = None,
          policy: RecoveryPolicy = DEFAULT_POLICY) -> list[SweepDecision]:
    """One sweep, never two at once (:mod:`~hypha_celery.beat.singleton`). Returns the
    decisions taken (ids and actions only): none when a sweep celery beat sent finds
    another one running or just done; a sweep called by hand waits for it."""
    with singleton.sweeping(rt) as mine:
        if not mine:
            log.debug("hypha recovery: another sweep holds the lock; skipped")
            return []
        return _timed(rt, lambda: _sweep(rt, now, policy))


def _timed(rt: Runtime, run: Callable[[], list[SweepDecision]]) -> list[SweepDecision]:
    """``run()``, then the middleware's ``after_sweep`` (its duration, for metrics)."""
    if not rt.middleware.wants("after_sweep"):
        return run()
    started = time.monotonic()
    decisions = run()
    rt.middleware.after_sweep(Sweep(time.monotonic() - started, len(decisions)))
    return decisions


def _sweep(rt: Runtime, now: float | None, policy: RecoveryPolicy) -> list[SweepDecision]:
    now = time.time() if now is None else now
    idle_before = now - min(policy.grace, policy.kickoff_lease)
    rows = rt.store.stale_runs(idle_before=idle_before, now=now, limit=policy.limit)
    views = rt.store.load_many([r["run_id"] for r in rows])
    leases = rt.store.leases([i for v in views.values() for i in awaited_task_ids(v)])
    decisions: list[SweepDecision] = []
    started = time.monotonic()
    for row in rows:
        if time.monotonic() - started > policy.budget:
            log.info("hypha recovery: sweep budget of %.2fs used; the rest waits", policy.budget)
            break
        view = views.get(row["run_id"])
        if view is None or view["seq"] != row["seq"]:
            continue  # moved since the query
        try:
            decision = _examine(rt, view, leases, now, policy)
        except Exception as exc:  # one run (or a broker hiccup) never stops the sweep
            log.warning("hypha recovery: %s on run %s", type(exc).__name__, row["run_id"])
            decision = {"run_id": row["run_id"], "action": "error",
                        "execution_id": view["waiting"], "why": type(exc).__name__}
        if decision is not None:
            decisions.append(decision)
            log.info("hypha recovery: %s %s %s", decision["action"], decision["run_id"],
                     decision.get("execution_id", ""))
    decisions.extend(_expire_reviews(rt, now))
    decisions.extend(_drain_broker_dead_letters(rt))
    decisions.extend(_sweep_agents(rt, now, policy))
    rt.store.prune_leases(now - policy.lease_retention)
    return decisions


def _expire_reviews(rt: Runtime, now: float) -> list[RunSweepDecision]:
    try:
        expired = expire_due(rt, now)
    except Exception as exc:  # never stops the sweep
        log.warning("hypha recovery: review expiry failed: %s", type(exc).__name__)
        return []
    return [{"run_id": run_id, "action": "review_expired", "execution_id": review_id}
            for run_id, review_id in expired]


def _sweep_agents(rt: Runtime, now: float, policy: RecoveryPolicy
                  ) -> list[AgentSweepDecision]:
    """The extra sweeps of ``rt.sweeps`` (the agents', added by :class:`~hypha_celery.Hypha`)."""
    decisions: list[AgentSweepDecision] = []
    for extra in rt.sweeps:
        try:
            decisions.extend(extra(now, policy.grace, policy.kickoff_lease, policy.limit))
        except Exception as exc:  # never stops the runs' sweep
            log.warning("hypha recovery: agents sweep failed: %s", type(exc).__name__)
    return decisions


def _examine(rt: Runtime, view: View, leases: dict[str, LeaseRow], now: float,
             policy: RecoveryPolicy) -> RunSweepDecision | None:
    if view["deadline"] is not None and now > view["deadline"]:
        return _act(rt, view, "deadline_exceeded", lambda tx, v: _fail_deadline(tx, rt, v))
    graph = rt.graphs.get(view["graph_id"] or "")
    waiting = view["waiting"]
    if view["status"] != "running" or graph is None or not waiting:
        return None  # quarantined / parked runs wait for a human; other apps' graphs
    if "awaiting_message" in view:
        return _examine_awaiting(rt, view, now)
    idle = now - max(view["updated_at"] or 0.0, view["retry_at"] or 0.0)
    backoff = policy.backoff ** int(view["recoveries"] or 0)
    if awaits_coordinator(view):
        if idle < policy.kickoff_lease * backoff:
            return None
        return _redrive(rt, view, graph, "not_started", policy)
    if view["fanout"]:
        return _examine_fanout(rt, view, graph, leases, now, idle, backoff, policy)
    return _examine_node(rt, view, graph, leases.get(waiting), now, idle, backoff, policy)


def _examine_awaiting(rt: Runtime, view: View, now: float) -> RunSweepDecision | None:
    """A run its node parked until a message comes (``run.suspended``): no
    worker to watch. Resumed if the message is queued (its publish's resume was lost
    with its process), timed out past the wait's ``until`` (``NodeTimeout``: the node's
    retry policy and the graph decide), else left alone."""
    awaited = view["awaiting_message"]
    if now > awaited["until"]:
        running = round(now - (view["updated_at"] or now), 3)
        return _act_step(rt, view, "timed_out",
                         lambda tx, v: _time_out(tx, rt, v, awaited["node_id"], running))
    if not bus_rows.reply_queued(rt.store, awaited["queue"], awaited["message_id"]):
        return None
    if not resume(rt, view["run_id"], awaited["message_id"]):
        return None
    return {"run_id": view["run_id"], "action": "resumed", "execution_id": view["waiting"],
            "why": "message_waiting"}


def _lease_of(rt: Runtime, graph: Graph, node_id: str, policy: RecoveryPolicy) -> float:
    return canvas.hard_limit(graph.timeout_for(node_id) + rt.local_budget) + policy.grace


def _examine_node(rt: Runtime, view: View, graph: Graph, lease: LeaseRow | None,
                  now: float, idle: float, backoff: float, policy: RecoveryPolicy
                  ) -> RunSweepDecision | None:
    node_id = view["waiting_nodes"][0]
    if alive(lease, rt.lease_interval, now):
        assert lease is not None
        running = now - lease["started_at"]
        if running <= graph.timeout_for(node_id) + policy.grace:
            return None  # alive and within its timeout
        return _act_step(rt, view, "timed_out",
                         lambda tx, v: _time_out(tx, rt, v, node_id, running))
    if idle < _lease_of(rt, graph, node_id, policy) * backoff:
        return None
    if graph.nodes[node_id].at_most_once and _effect_started(rt, view):
        return _unknown_effect(rt, view, graph, node_id)
    if int(view["recoveries"] or 0) >= policy.max_redrives:
        return _act_step(rt, view, "exhausted",
                         lambda tx, v: _exhaust(tx, rt, v, graph, node_id))
    if any(_circuit_open(rt, key, now) for key in graph.dependencies_of(node_id)):
        return {"run_id": view["run_id"], "action": "circuit_open",
                "execution_id": view["waiting"]}
    return _redrive(rt, view, graph, "worker_lost" if lease else "not_started", policy)


def _examine_fanout(rt: Runtime, view: View, graph: Graph, leases: dict[str, LeaseRow],
                    now: float, idle: float, backoff: float, policy: RecoveryPolicy
                    ) -> RunSweepDecision | None:
    fid = view["waiting"]
    edges = _edges(rt, view)
    stuck = False
    for i, edge in enumerate(edges):
        lease = leases.get(f"{fid}.{i}")
        if alive(lease, rt.lease_interval, now):
            assert lease is not None
            if now - lease["started_at"] <= graph.timeout_for(edge.node_id) + policy.grace:
                return None  # an edge is still working
            _time_out_edge(rt, edge, now - lease["started_at"])
            stuck = True
    lease_len = max(_lease_of(rt, graph, e.node_id, policy) for e in edges)
    if not stuck and idle < lease_len * backoff:
        return None
    unknown = _unknown_edge(rt, view, graph, edges)
    if unknown is not None:
        return _quarantine(rt, view, unknown.node_id, 1, "unknown_commit_state",
                           unknown.execution_id)
    if int(view["recoveries"] or 0) >= policy.max_redrives:
        return _act_step(rt, view, "exhausted", lambda tx, v: _exhaust_fanout(tx, rt, v))
    return _redrive(rt, view, graph, "timed_out" if stuck else "worker_lost", policy)


def _unknown_edge(rt: Runtime, view: View, graph: Graph, edges: list[NodeMessage]
                  ) -> NodeMessage | None:
    """An at-most-once edge that started (first attempt) and has no stored outcome."""
    effects = [e for e in edges if graph.nodes[e.node_id].at_most_once]
    if not effects:
        return None
    done = rt.store.outcomes([f"{e.execution_id}:done" for e in effects])
    for edge in effects:
        if f"{edge.execution_id}:done" not in done and rt.store.has_event(
                f"{edge.execution_id}:started:1"):
            return edge
    return None


# -- actions --------------------------------------------------------------
def _act(rt: Runtime, view: View, action: str,
         fn: Callable[[Tx, View], None]) -> RunSweepDecision | None:
    """Run ``fn`` on the locked run if it has not moved since the sweep read it."""
    with rt.store.transaction() as tx:
        locked = tx.lock(view["run_id"])
        if locked is None or locked["seq"] != view["seq"]:
            return None
        fn(tx, locked)
    return {"run_id": view["run_id"], "action": action, "execution_id": view["waiting"]}


def _act_step(rt: Runtime, view: View, action: str,
              fn: Callable[[Tx, View], None]) -> RunSweepDecision | None:
    """:func:`_act` for an action that runs a coordinator step (``step_locked``), between
    ``before_step`` and ``after_step`` around its transaction, as a task's step is (told
    also when the run moved on and nothing was done, as for a duplicate message)."""
    return seams.stepped(rt, view["run_id"], _waiting(view),
                         lambda: _act(rt, view, action, fn))


def _fail_deadline(tx: Tx, rt: Runtime, view: View) -> None:
    ids = awaited_task_ids(view)
    terminal(tx, rt, view, ev.RunFailed(
        reason=FailureReason.DEADLINE_EXCEEDED.value, by="supervisor",
        message="execution_timeout passed (enforced by the recovery supervisor)"))
    tx.after_commit(lambda: canvas.revoke(rt.app, ids))


def _timeout_error(running: float) -> ErrorJson:
    return {"type": "NodeTimeout", "class": "timeout", "by": "supervisor",
            "message": f"still running after {running:.1f}s (enforced by the supervisor)"}


def _time_out(tx: Tx, rt: Runtime, view: View, node_id: str, running: float) -> None:
    eid = _waiting(view)
    tx.emit(view["run_id"], ev.RecoveryNodeTimedOut(execution_id=eid, node_id=node_id,
                                                    running=round(running, 3)))
    step_locked(tx, rt, view, NodeOutcome(view["run_id"], eid, node_id,
                                          error=_timeout_error(running),
                                          duration=round(running, 3)))


def _time_out_edge(rt: Runtime, edge: NodeMessage, running: float) -> None:
    """Store a NodeTimeout outcome for a stuck edge (first writer wins): the re-driven
    chord then completes and the reducer sees the timeout; a late result is dropped."""
    outcome = NodeOutcome(edge.run_id, edge.execution_id, edge.node_id,
                          error=_timeout_error(running), duration=round(running, 3),
                          edge_of=edge.edge_of, index=edge.index)
    rt.store.put_outcome(edge.run_id, f"{edge.execution_id}:done", outcome.stored_json())


def _waiting(view: View) -> str:
    """The execution id a running run awaits (the sweep examines only those)."""
    waiting = view["waiting"]
    assert waiting is not None
    return waiting


def _redrive(rt: Runtime, view: View, graph: Graph, why: str, policy: RecoveryPolicy,
             node_attempt: int | None = None) -> RunSweepDecision | None:
    attempt = int(view["recoveries"] or 0) + 1
    publish = _publisher(rt, view, graph, node_attempt)

    def record(tx: Tx, v: View) -> None:
        redriven = ev.RecoveryRunRedriven(execution_id=v["waiting"], attempt=attempt, why=why)
        if node_attempt:
            redriven = ev.RecoveryRunRedriven(execution_id=v["waiting"], attempt=attempt,
                                              why=why, node_attempt=node_attempt)
        tx.emit(v["run_id"], redriven)
        # published before the commit: if the broker is down nothing is recorded and the
        # next sweep tries again (no re-drive attempt burned); if the commit fails after
        # a publish, the message is a duplicate with the same ids, which is fenced
        publish()

    decision = _act(rt, view, "redriven", record)
    if decision is not None:
        decision["why"] = why
    return decision


def _publisher(rt: Runtime, view: View, graph: Graph, node_attempt: int | None
               ) -> Callable[[], None]:
    """The message(s) that re-drive the awaited execution: same ids, so duplicates are
    fenced."""
    run_id, eid = view["run_id"], _waiting(view)
    if awaits_coordinator(view):
        return lambda: canvas.kickoff(rt.app, run_id, eid)
    if view["fanout"]:
        scheduled = rt.store.last_event(run_id, "node.fanout.scheduled")
        assert scheduled is not None
        fanout = scheduled.body_as(ev.NodeFanoutScheduled)
        calls, reducer = fanout_calls(rt, graph, run_id, eid, fanout.edges), fanout.reducer
        return lambda: publish_fanout(rt, graph, run_id, eid, reducer, calls)
    msg = scheduled_message(rt.store, view)
    attempt = node_attempt or int(view["attempt"] or 1)
    if attempt > 1:
        msg = msg.with_attempt(attempt)
    call = node_call(rt, graph, msg)
    return lambda: canvas.step(rt.app, call)


def _edges(rt: Runtime, view: View) -> list[NodeMessage]:
    run_id, fid = view["run_id"], _waiting(view)
    event = rt.store.last_event(run_id, "node.fanout.scheduled")
    assert event is not None
    return [NodeMessage(run_id, e["execution_id"], e["node_id"], e.get("input"), fid, i)
            for i, e in enumerate(event.body_as(ev.NodeFanoutScheduled).edges)]


def _exhaust(tx: Tx, rt: Runtime, view: View, graph: Graph, node_id: str) -> None:
    msg = scheduled_message(rt.store, view)
    attempts = int(view["recoveries"] or 0)
    tx.emit(view["run_id"], ev.RecoveryRedriveExhausted(execution_id=view["waiting"],
                                                        attempts=attempts))
    error: ErrorJson = {"type": "RecoveryExhausted", "class": "unknown",
                        "message": f"no progress after {attempts} re-drives"}
    queue = node_call(rt, graph, msg).queue
    step_locked(tx, rt, view, failures.dead_lettered(
        msg, error, f"{graph.id}.{node_id}", queue, attempts=attempts,
        reason="recovery_exhausted"))


def _exhaust_fanout(tx: Tx, rt: Runtime, view: View) -> None:
    attempts = int(view["recoveries"] or 0)
    tx.emit(view["run_id"], ev.RecoveryRedriveExhausted(execution_id=view["waiting"],
                                                        attempts=attempts))
    scheduled = rt.store.last_event(view["run_id"], "node.fanout.scheduled")
    reducer = scheduled.body_as(ev.NodeFanoutScheduled).reducer if scheduled else "?"
    step_locked(tx, rt, view, ReducerOutcome(
        view["run_id"], _waiting(view), reducer, error={
            "type": "RecoveryExhausted", "class": "unknown",
            "message": f"fan-out made no progress after {attempts} re-drives"}))


# -- at-most-once nodes with an unknown commit state ------------------------
def _effect_started(rt: Runtime, view: View) -> bool:
    attempt = int(view["attempt"] or 1)
    return rt.store.has_event(f"{view['waiting']}:started:{attempt}")


def _unknown_effect(rt: Runtime, view: View, graph: Graph, node_id: str) -> RunSweepDecision | None:
    """The node started and its worker is gone: did the effect happen?"""
    eid, attempt = _waiting(view), int(view["attempt"] or 1)
    stored = rt.store.outcomes([effect_key(eid, attempt)]).get(effect_key(eid, attempt))
    if stored is not None:  # it finished; only the coordinator message was lost
        outcome = NodeOutcome.from_json(stored, view["run_id"])
        if outcome.effect_unknown:  # it says its effect is unknown: the step quarantines
            return _act_step(rt, view, "quarantined",
                             lambda tx, v: step_locked(tx, rt, v, outcome))
        return _reconcile(rt, view, outcome, "outcome")
    node = graph.nodes[node_id]
    if node.receipt is None:
        return _quarantine(rt, view, node_id, attempt, "unknown_commit_state")
    msg = scheduled_message(rt.store, view)
    ctx = NodeContext(view["run_id"], eid, node_id, attempt)
    try:
        found = node.receipt(dict(view["state"]), msg.input, ctx)
    except Exception as exc:
        log.warning("hypha recovery: receipt of %s raised %s", eid, type(exc).__name__)
        return _quarantine(rt, view, node_id, attempt, "receipt_failed")
    if found is None:  # it did not happen: run it again as the next attempt
        return _redrive(rt, view, graph, "not_committed", DEFAULT_POLICY, attempt + 1)
    return _reconcile(rt, view, NodeOutcome(view["run_id"], eid, node_id, update=dict(found)),
                      "receipt")


def _reconcile(rt: Runtime, view: View, outcome: NodeOutcome, source: str
               ) -> RunSweepDecision | None:
    def record(tx: Tx, v: View) -> None:
        tx.emit(v["run_id"], ev.RecoveryOutcomeReconciled(execution_id=v["waiting"],
                                                          committed=True, source=source))
        step_locked(tx, rt, v, outcome)

    return _act_step(rt, view, "reconciled", record)


def _quarantine(rt: Runtime, view: View, node_id: str, attempt: int, reason: str,
                execution_id: str | None = None) -> RunSweepDecision | None:
    def record(tx: Tx, v: View) -> None:
        lifecycle.emit(tx, v["run_id"], ev.RunQuarantined(
            execution_id=execution_id or _waiting(v), node_id=node_id, attempt=attempt,
            reason=reason))

    return _act(rt, view, "quarantined", record)


def _circuit_open(rt: Runtime, key: str, now: float) -> bool:
    circuit = rt.store.circuit(key)
    return circuit is not None and circuit["open_until"] > now


# -- RabbitMQ: messages the broker dead-lettered ----------------------------
def _drain_broker_dead_letters(rt: Runtime) -> list[RunSweepDecision]:
    if not rabbit.is_amqp(str(rt.app.conf.broker_url or "")):
        return []
    decisions: list[RunSweepDecision] = []

    def handle(msg: Any) -> None:
        decision = _broker_dead_letter(rt, msg)
        if decision is not None:
            decisions.append(decision)

    rabbit.drain_dead_letters(rt.app, handle)
    return decisions


def _broker_dead_letter(rt: Runtime, msg: Any) -> RunSweepDecision | None:
    """A message RabbitMQ dead-lettered (delivery limit, rejected): feed the run the
    failure. A node's goes to the coordinator at once; an edge's is stored as the edge's
    outcome, and the fan-out's next re-drive hands it to the reducer. Expired messages
    (a supervisor tick nobody picked up in time) are dropped: they carry no work."""
    if msg.reason == "expired" or msg.task == SUPERVISOR_TASK:
        return None
    env = msg.args[0] if msg.args and isinstance(msg.args[0], dict) else None
    view = rt.store.load(env["run_id"]) if env and isinstance(env.get("run_id"), str) else None
    graph = rt.graphs.get(view["graph_id"] or "") if view else None
    if env is None or graph is None or failures.envelope_problem(env, graph, msg.task):
        failures.malformed(rt, msg.task, env if env is not None else msg.args, msg.reason,
                           f"dead-lettered by the broker ({msg.reason})")
        return {"run_id": None, "action": "dead_lettered", "execution_id": msg.task_id}
    error: ErrorJson
    if msg.reason == "delivery_limit":
        error = {"type": "DeliveryLimitExceeded", "class": "unknown",
                 "message": f"the broker dead-lettered it after {msg.delivery_count} deliveries"}
    else:
        error = {"type": "BrokerDeadLettered", "class": "unknown",
                 "message": f"the broker dead-lettered it ({msg.reason[:40]})"}
    reason = "delivery_limit" if msg.reason == "delivery_limit" else "broker_rejected"
    outcome = failures.dead_lettered(NodeMessage.from_json(env), error, msg.task, msg.queue,
                                     attempts=msg.delivery_count, reason=reason)
    if outcome.edge_of is not None:
        rt.store.put_outcome(env["run_id"], f"{env['execution_id']}:done",
                             outcome.stored_json())
    else:
        seams.stepped(rt, outcome.run_id, outcome.execution_id,
                      lambda: coordinate(rt, outcome))
    return {"run_id": env["run_id"], "action": "dead_lettered",
            "execution_id": env["execution_id"]}
