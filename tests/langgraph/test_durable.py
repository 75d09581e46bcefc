"""Distributed LangGraph graphs under real faults: real ``celery worker`` processes
(prefork) of :mod:`tests.langgraph.durable_app` on Redis + PostgreSQL, two of them with
two pool processes each; a worker's whole process group SIGKILLed mid-node (the
helpers of ``tests/integration/test_chaos.py``: ``GroupWorker``, ``Sweeper``).

The recovery supervisor runs in the test process (a ``Sweeper`` thread calling
``hypha_celery.beat.sweep`` every 0.5 s with a fast policy); every node has a 3 s
timeout, so a lost node is re-driven ~9 s after its last event. The reference is
LangGraph itself: ``compile(checkpointer=InMemorySaver())`` of the same builder, in
this process.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from langgraph.checkpoint.memory import InMemorySaver

from hypha_celery import Event, Hypha
from hypha_celery.runtime.core import awaited_task_ids
from hypha_celery.store.recovery import LeaseRow
from tests.integration.helpers import (
    Backends,
    assert_well_formed,
    claim_db,
    close_client,
    of_kind,
    purge,
    queues_of,
    release_db,
    wait_until,
)
from tests.integration.test_chaos import LEASE, Cluster, GroupWorker, Sweeper
from tests.langgraph import durable_graphs as dg

pytestmark = pytest.mark.services

APP = "tests.langgraph.durable_app:celery"
WORKERS = 2
CONCURRENCY = 2
#: Upper bound for a run that loses a node to a kill (re-driven after ~9 s).
RECOVERY_WAIT = 40.0


class LgWorker(GroupWorker):
    """A killable worker (``GroupWorker``) of :data:`APP`; ``again()`` keeps the app."""

    def again(self) -> LgWorker:
        return LgWorker(self.backends, self.log_path, queues=self.queues,
                        concurrency=self.concurrency, app=APP, env=self.extra)


@dataclasses.dataclass
class Durable:
    cluster: Cluster
    graphs: dict[str, Any]

    @property
    def client(self) -> Hypha:
        return self.cluster.client


@pytest.fixture(scope="module")
def durable(redis_base: str, pg_url: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Durable]:
    """A client with the graphs distributed and two workers (prefork, two processes
    each) on a Redis database of this module's own."""
    token = uuid.uuid4().hex
    url = claim_db(redis_base, token)
    backends = Backends("redis", url, url, pg_url)
    client = Hypha(dataclasses.replace(backends.settings(), lease_interval=LEASE))
    graphs = dg.distribute_all(client)
    client.store.migrate()
    names = queues_of(client)
    purge(url, names)
    logs = tmp_path_factory.mktemp("lg-durable")
    env = {"HYPHA_LEASE_INTERVAL": str(LEASE)}
    workers: list[GroupWorker] = [
        LgWorker(backends, logs / f"worker{i}.log", queues=names, concurrency=CONCURRENCY,
                 app=APP, env=env) for i in range(WORKERS)]
    side = redis.Redis.from_url(url)
    c = Cluster(client, workers, side)
    try:
        for w in workers:
            w.spawn()
        for w in workers:
            w.ready(client.celery)
        yield Durable(c, graphs)
    finally:
        for w in c.workers:
            w.stop()
        close_client(client)
        side.close()
        release_db(url, token)


# -- helpers ------------------------------------------------------------------------
def reference(gid: str) -> Any:
    return dg.BUILDERS[gid]().compile(checkpointer=InMemorySaver())


def config() -> dict[str, Any]:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


def runs_of(d: Durable, tag: str) -> dict[str, int]:
    """How many times each node function ran for the run tagged ``tag``."""
    raw = d.cluster.side.hgetall(dg.RUNS)
    prefix = f"{tag}:".encode()
    return {k[len(prefix):].decode(): int(v) for k, v in raw.items() if k.startswith(prefix)}


def started(d: Durable, run_id: str, node: str) -> Event | None:
    found = [e for e in of_kind(d.client.store.events(run_id), "node.execution.started")
             if e.data["node_id"] == node]
    return found[0] if found else None


def lease(d: Durable, run_id: str) -> LeaseRow | None:
    """The lease of the run's one node execution running for a while, if any: hypha's
    record of a node mid-call (an ordinary node's ``node.execution.started`` is written
    with its outcome; only an at-most-once node's is committed before its call)."""
    rows = list(d.client.store.leases(awaited_task_ids(d.client.store.get(run_id))).values())
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def kill_mid_node(d: Durable, run_id: str, tag: str, node: str) -> LeaseRow:
    """Once ``node`` is mid-call (its function was entered and its lease written),
    SIGKILL the process group of the worker running it and start a fresh worker in its
    place. Returns the lease."""
    c = d.cluster

    def running() -> LeaseRow | None:
        return lease(d, run_id) if runs_of(d, tag).get(node) else None

    row: LeaseRow = wait_until(running, 30, f"{node} to run", c.tail)
    i = worker_of(c, row["worker"])
    assert runs_of(d, tag).get(node) == 1  # still mid-call (it sleeps SLOW_S)
    c.kill_and_restart(i)
    return row


def worker_of(c: Cluster, worker: str) -> int:
    """The worker whose process group holds the pool process ``worker`` (``host:pid``;
    each worker is a session of its own: its group id is its pid)."""
    group = os.getpgid(int(worker.rsplit(":", 1)[1]))
    found = [i for i, w in enumerate(c.workers) if w.proc is not None and w.proc.pid == group]
    assert len(found) == 1, (worker, group, [w.proc and w.proc.pid for w in c.workers])
    return found[0]


def result(d: Durable, gid: str, handle: Any, timeout: float) -> Any:
    try:
        value = handle.wait(timeout=timeout)
    except Exception as exc:
        raise AssertionError(f"{exc!r}\n{d.cluster.tail()}") from None
    return d.graphs[gid].engine.codec.decode(value)


# -- 1. a worker killed mid-node: re-driven, LangGraph's final state ------------------
@pytest.mark.parametrize("slow", ["work", "left"], ids=["linear-node", "parallel-edge"])
def test_worker_killed_mid_node_run_ends_with_langgraphs_state(durable: Durable,
                                                               slow: str) -> None:
    """``work`` (a superstep's only task) or ``left`` (a task of the parallel superstep:
    an edge of a chord) is killed mid-call with its worker; the supervisor re-drives it
    on the live or the fresh worker. Nodes that finished before the kill are not run
    again; the killed one runs twice; the final values are LangGraph's."""
    d, gid = durable, "lgd_pipeline"
    tag = uuid.uuid4().hex
    inputs = {"tag": tag, "slow": slow, "text": "in", "items": []}
    ref, rcfg = reference(gid), config()
    want = ref.invoke(inputs, rcfg)
    cfg = config()
    with Sweeper(d.cluster.rt) as sweeper:
        handle = d.graphs[gid].start(inputs, cfg)
        kill_mid_node(d, handle.id, tag, slow)
        got = result(d, gid, handle, RECOVERY_WAIT)
    assert got == want
    assert d.graphs[gid].get_state(cfg).values == ref.get_state(rcfg).values
    events = d.client.store.events(handle.id)
    assert assert_well_formed(events).kind == "run.completed"
    assert of_kind(events, "recovery.run.redriven"), sweeper.actions()
    runs = runs_of(d, tag)
    before = ["prep"] if slow == "work" else ["prep", "work"]
    assert {n: runs[n] for n in before} == dict.fromkeys(before, 1), runs
    assert runs[slow] == 2, runs
    assert set(runs) == {"prep", "work", "left", "right", "merge"}, runs


# -- 2. an at-most-once node killed mid-call: quarantined, not run again --------------
def test_effect_node_killed_mid_call_is_quarantined_not_rerun(durable: Durable) -> None:
    """``charge`` is marked ``side_effect="external_effect"`` through
    ``distribute(nodes=)``: when its worker dies mid-call the supervisor quarantines the
    run (the effect may have happened) instead of re-driving it; the effect ran once.
    An operator's ``release`` runs it again, and the run ends with LangGraph's values."""
    d, gid = durable, "lgd_payment"
    tag = uuid.uuid4().hex
    inputs = {"tag": tag, "amount": 42, "log": []}
    want = reference(gid).invoke(inputs, config())
    with Sweeper(d.cluster.rt) as sweeper:
        handle = d.graphs[gid].start(inputs, config())
        kill_mid_node(d, handle.id, tag, "charge")
        ev = started(d, handle.id, "charge")  # committed before the call
        assert ev is not None and ev.data["at_most_once"] is True
        wait_until(lambda: handle.status().status == "quarantined", RECOVERY_WAIT,
                   "the supervisor to quarantine the run", d.cluster.tail)
        events = handle.events()
        (q,) = of_kind(events, "run.quarantined")
        assert q.data["node_id"] == "charge" and q.data["reason"] == "unknown_commit_state"
        assert of_kind(events, "recovery.run.redriven") == []
        time.sleep(2.0)  # later sweeps, live workers: nothing runs the effect again
        assert handle.status().status == "quarantined"
        assert runs_of(d, tag) == {"quote": 1, "charge": 1}
        assert not [x for x in sweeper.decisions
                    if x["run_id"] == handle.id and x["action"] == "redriven"]
    d.client.release(handle.id)  # an operator checked the charge did not happen
    assert result(d, gid, handle, 30) == want
    assert runs_of(d, tag) == {"quote": 1, "charge": 2, "receipt": 1}


# -- 3. two runs of one thread at once: one after the other, LangGraph's thread -------
def test_runs_of_one_thread_are_serialized_and_continue_the_thread(durable: Durable
                                                                   ) -> None:
    """Two runs started at once on one ``thread_id`` with four worker processes free:
    the second is queued in the thread's lane, starts (and runs every node) after the
    first ended, and continues from the first's final state, as LangGraph's second
    ``invoke`` on the thread does."""
    d, gid = durable, "lgd_conversation"
    ref, rcfg = reference(gid), config()
    first, second = {"turn": "r1", "log": ["hi"]}, {"turn": "r2", "log": ["again"]}
    want1, want2 = ref.invoke(first, rcfg), ref.invoke(second, rcfg)
    cfg = config()
    graph = d.graphs[gid]
    h1, h2 = graph.start(first, cfg), graph.start(second, cfg)
    got2 = result(d, gid, h2, 30)
    got1 = result(d, gid, h1, 5)
    assert (got1, got2) == (want1, want2)
    assert graph.get_state(cfg).values == ref.get_state(rcfg).values
    ev1, ev2 = d.client.store.events(h1.id), d.client.store.events(h2.id)
    end1 = assert_well_formed(ev1)
    assert assert_well_formed(ev2).kind == end1.kind == "run.completed"
    # the second run waited in the thread's lane (queued at once), and everything it did
    # from its start on came after the first run's end
    assert [e.kind for e in ev2[:2]] == ["run.created", "run.queued"], ev2[:3]
    after = ev2[2:]
    assert after[0].kind == "run.started" and of_kind(after, "node.execution.started")
    assert min(e.timestamp for e in after) >= end1.timestamp, (
        [(e.kind, e.timestamp) for e in ev1], [(e.kind, e.timestamp) for e in ev2])
