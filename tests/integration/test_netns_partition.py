"""Hosts that lose their network (issue 27 point 8): two "hosts" (Linux network
namespaces, a veth pair each) run real ``hypha worker`` processes; under load one host's
link is cut for longer than every lease, then brought back.

* Redis (a private ``redis-server``) and PostgreSQL (a fresh database, through a TCP
  forwarder in this process) listen on the root-side veth addresses; see
  :mod:`tests.integration.netns`. The test process (client, load, and the recovery
  supervisor: ``sweep()`` every 0.5 s with a fast policy, as in test_chaos -- the
  ``hypha.supervisor`` beat task would use the default one, 10 s of grace) stays in the
  root namespace, always connected.
* Each host: ``hypha worker --profile cpu`` (prefork, 3 processes: coordinator and node
  queues) and ``hypha worker --profile io`` (threads: the agents' turns). Leases beat
  every 0.5 s; the Redis visibility timeout is 10 s.
* Load: 300 graph runs (240 of three steps, 60 fan-outs of three leaves + reducer + a
  step), at most 40 in flight, and 100 agent turns (20 agents, 5 turns each, a turn
  streams 1-2.5 s on the Mock backend). After 60 runs have finished, host ``a``'s link
  goes down for 20 s (a re-drive comes after 8 s without progress, an agent's owner is
  replaced 1.5 s after its last heartbeat, an unacked message is restored after 10 s).
  A cut-off host's established connections stall; a new one fails after ~3 s (no route
  to host: its neighbour never answers).

Checked: every run completes with its result, once (one terminal event, one outcome per
execution); every turn ends once (one terminal turn event, its decision applied once);
what host ``a`` finished while cut off and sent after the link came back was fenced: the
log holds another delivery's result for that execution (a re-drive, same execution id)
or the turn ended ``task_crashed`` when another owner took over. The runtime records no
event for such a late result (a duplicate of an execution whose outcome is recorded, or a
write by an owner that lost the agent, is dropped silently: ``node.execution.late_result``
and ``agent.turn.late_result`` are for other cases), so the test tells it from the side
records of :mod:`~tests.integration.netns`. The numbers are printed as one JSON line,
with what PostgreSQL held during the cut: a session of host ``a`` left idle in a
transaction keeps its row locks until the host comes back, and whoever needs that row
(the recovery sweep included) waits as long.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from hypha_celery import Hypha, RecoveryPolicy, Settings
from hypha_celery.beat import sweep
from hypha_celery.events import Event
from hypha_celery.runtime.core import Runtime, SweepDecision
from hypha_celery.store import agents as agent_rows
from hypha_celery.store import scratch_database
from hypha_celery.store.schema import runs as runs_table
from tests import services
from tests.integration import netns
from tests.integration.helpers import (
    REPO,
    assert_exactly_once,
    assert_well_formed,
    clean_env,
    close_client,
    of_kind,
    wait_until,
)

pytestmark = pytest.mark.services

LEASE = 0.5
VISIBILITY = 10.0
#: A lost node is re-driven ~8 s after its run's last event (hard limit of the 2 s node
#: timeout + 1 s grace), a busy agent whose owner stopped beating after 1 s (its claim
#: then waits until the beat is 1.5 s old).
FAST = RecoveryPolicy(grace=1.0, kickoff_lease=3.0, max_redrives=20)
RUNS = 300
FAN_EVERY = 5  # every fifth run is a fan-out
IN_FLIGHT = 40
AGENTS = 20
TURNS = 5
#: Agent i tells its first prompt i * STAGGER s after the load starts.
STAGGER = 1.0
CUT_AFTER = 60  # finished runs when host a's link goes down
CUT_S = 20.0
CPU_PROCESSES = 3
IO_THREADS = 32
LOAD_LIMIT = 150.0  # seconds the load may take, partition included
TERMINAL = ("completed", "failed", "cancelled")
PG_ADMIN = os.environ.get("HYPHA_TEST_PG_URL",
                          "postgresql+psycopg://postgres@127.0.0.1:5432/test")


# -- the cluster ---------------------------------------------------------------------
@dataclass
class Cluster:
    client: Hypha
    hosts: dict[str, netns.Host]
    workers: list[netns.NsWorker]
    forwarder: netns.Forwarder
    ends_file: Path

    @property
    def rt(self) -> Runtime:
        return self.client._rt

    def of(self, label: str) -> list[netns.NsWorker]:
        return [w for w in self.workers if w.host.label == label]

    def tail(self) -> str:
        return "\n".join(f"--- {w.name} ---\n{w.tail(2500)}" for w in self.workers)

    def pong(self, workers: Sequence[netns.NsWorker]) -> bool:
        for w in workers:
            if not w.alive():
                raise AssertionError(f"{w.name} exited:\n{w.tail()}")
        names = [w.name for w in workers]
        replies = self.client.celery.control.ping(destination=names, timeout=1.0)
        return {name for reply in replies for name in reply} == set(names)

    def idle(self, workers: Sequence[netns.NsWorker]) -> bool:
        """No task running on ``workers`` (they answer, with empty lists)."""
        names = [w.name for w in workers]
        active = self.client.celery.control.inspect(destination=names, timeout=2.0).active()
        return active is not None and set(active) == set(names) and not any(active.values())


def _store_url(db_url: str, addr: str, port: int, label: str) -> str:
    url = sa.make_url(db_url).set(host=addr, port=port,
                                  query={"application_name": f"netns-{label}"})
    return url.render_as_string(hide_password=False)


def _workers(hosts: dict[str, netns.Host], redis_port: int, db_url: str,
             pg_ports: dict[str, int], logs: Path, token: str,
             ends_file: Path) -> list[netns.NsWorker]:
    hypha = str(Path(sys.executable).with_name("hypha"))
    out: list[netns.NsWorker] = []
    for label, host in hosts.items():
        broker = f"redis://{host.root_addr}:{redis_port}/0"
        env = clean_env(HYPHA_BROKER_URL=broker, HYPHA_RESULT_BACKEND=broker,
                        HYPHA_STORE_URL=_store_url(db_url, host.root_addr, pg_ports[label],
                                                   label),
                        HYPHA_LEASE_INTERVAL=str(LEASE),
                        HYPHA_VISIBILITY_TIMEOUT=str(VISIBILITY),
                        **{netns.HOST_ENV: label, netns.ENDS_ENV: str(ends_file)})
        for profile, size in (("cpu", CPU_PROCESSES), ("io", IO_THREADS)):
            name = f"{profile}-{label}-{token}@netns"
            argv = [hypha, "worker", "--app", "tests.integration.netns:hypha",
                    "--profile", profile, "--concurrency", str(size), "--loglevel", "WARNING",
                    f"--hostname={name}", "--without-gossip", "--without-mingle"]
            out.append(netns.NsWorker(host, name, argv, env, logs / f"{profile}-{label}.log",
                                      REPO))
    return out


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Two hosts, their services and workers; everything undone at the end, failure or
    not (workers, forwarder, Redis, the database, veths and namespaces)."""
    reason = netns.probe()
    if reason is not None:
        services.unavailable(f"network namespaces ({reason})")
    binary = shutil.which("redis-server")
    if binary is None:
        services.unavailable("redis-server (a private Redis on the veth addresses)")
    if not services.port_open("127.0.0.1", 5432):
        services.unavailable("PostgreSQL (127.0.0.1:5432)")
    assert binary is not None
    token = uuid.uuid4().hex[:6]
    with ExitStack() as stack:
        db_url = stack.enter_context(scratch_database(PG_ADMIN, prefix="hypha_netns_"))
        hosts = stack.enter_context(netns.hosts(["a", "b"]))
        (tmp_path / "redis").mkdir()
        server = netns.PrivateRedis(binary, tmp_path / "redis",
                                    [h.root_addr for h in hosts.values()],
                                    services.free_port()).start()
        stack.callback(server.stop)
        stack.callback(gc.collect)  # AsyncResults unsubscribe while Redis is still up
        forwarder = netns.Forwarder(("127.0.0.1", 5432))
        stack.callback(forwarder.close)
        pg_ports = {label: forwarder.listen(h.root_addr) for label, h in hosts.items()}
        settings = Settings(broker_url=server.url(), result_backend=server.url(),
                            store_url=db_url, embedded=False, lease_interval=LEASE,
                            visibility_timeout=VISIBILITY)
        client = netns.build(settings)
        stack.callback(close_client, client)
        stack.callback(netns.release_app, client.celery)
        client.store.migrate()
        ends_file = tmp_path / "ends.jsonl"
        ends_file.touch()
        workers = _workers(hosts, server.port, db_url, pg_ports, tmp_path, token, ends_file)
        c = Cluster(client, hosts, workers, forwarder, ends_file)
        for w in workers:
            stack.callback(w.stop)
            w.spawn()
        wait_until(lambda: c.pong(workers), 90, "the workers to answer ping", c.tail)
        yield c


# -- the supervisor, in a thread of the test process -----------------------------------
@dataclass
class Sweeper:
    rt: Runtime
    policy: RecoveryPolicy = FAST
    interval: float = 0.5
    decisions: list[SweepDecision] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: (wall-clock start, seconds) of every sweep
    durations: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="netns-sweeper", daemon=True)

    def _loop(self) -> None:
        try:
            while not self._halt.wait(self.interval):
                began, wall = time.monotonic(), time.time()
                try:
                    self.decisions.extend(sweep(self.rt, policy=self.policy))
                except Exception as exc:
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                self.durations.append((wall, time.monotonic() - began))
        finally:
            netns.release_thread_backend(self.rt.app)

    def __enter__(self) -> Sweeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(60)

    def longest(self, since: float) -> tuple[float, float]:
        """The longest sweep: (its start, seconds after ``since``; its duration)."""
        wall, took = max(self.durations, key=lambda d: d[1], default=(since, 0.0))
        return round(wall - since, 1), round(took, 2)

    def actions(self) -> Counter[str]:
        return Counter(f"{d['action']}:{d.get('why', '')}" for d in self.decisions)


# -- the partition ------------------------------------------------------------------------
@dataclass
class Partition:
    """Host ``a``'s link: down once ``CUT_AFTER`` runs finished, up ``CUT_S`` later; the
    PostgreSQL sessions are looked at every second in between."""

    c: Cluster
    host: netns.Host
    cut_at: float | None = None
    healed_at: float | None = None
    locks: LockWatch = field(default_factory=lambda: LockWatch())
    _next_look: float = 0.0

    def tick(self, finished: int) -> None:
        now = time.time()
        if self.cut_at is None:
            if finished >= CUT_AFTER:
                self.host.cut()
                self.cut_at = now
            return
        if self.healed_at is not None:
            return
        if now >= self._next_look:
            self.locks.look(self.c.client)
            self._next_look = now + 1.0
        if now - self.cut_at >= CUT_S:
            self.host.heal()
            self.healed_at = time.time()

    @property
    def healed(self) -> bool:
        return self.healed_at is not None


#: The hosts' sessions (application name ``netns-a`` / ``netns-b``; the test's: ``-``),
#: whether one waits for a lock, the tables it holds a row-level lock mode on, and how
#: its statement starts (SQL text with placeholders: no data).
SESSIONS = sa.text("""
SELECT coalesce(nullif(a.application_name, ''), '-') AS app, a.state,
       cardinality(pg_blocking_pids(a.pid)) > 0 AS blocked, left(a.query, 70) AS query,
       array_remove(array_agg(DISTINCT c.relname) FILTER (
           WHERE l.mode IN ('RowShareLock', 'RowExclusiveLock')), NULL) AS tables
FROM pg_stat_activity a
LEFT JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'relation'
LEFT JOIN pg_class c ON c.oid = l.relation AND c.relkind = 'r'
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
GROUP BY a.pid, a.application_name, a.state, a.query""")


@dataclass
class LockWatch:
    """During the cut: host a's sessions left idle in a transaction (their host cannot
    finish it; PostgreSQL keeps it open, and its locks), those of them that locked or
    wrote rows (which tables, their last statement), and the sessions waiting for a
    lock (by host, and their statement)."""

    looks: int = 0
    a_idle_in_transaction: int = 0
    a_holding_row_locks: int = 0
    tables: set[str] = field(default_factory=set)
    holders: set[str] = field(default_factory=set)
    waiting: Counter[str] = field(default_factory=Counter)
    waiters: set[str] = field(default_factory=set)

    def look(self, client: Hypha) -> None:
        with client.store.reader.connect() as conn:
            rows = conn.execute(SESSIONS).all()
        stuck = [r for r in rows if r.app == "netns-a" and r.state == "idle in transaction"]
        holding = [r for r in stuck if r.tables]
        blocked = [r for r in rows if r.blocked]
        self.looks += 1
        self.a_idle_in_transaction = max(self.a_idle_in_transaction, len(stuck))
        self.a_holding_row_locks = max(self.a_holding_row_locks, len(holding))
        self.tables.update(t for r in holding for t in r.tables)
        self.holders.update(" ".join(r.query.split()) for r in holding)
        for app, n in Counter(r.app for r in blocked).items():
            self.waiting[app] = max(self.waiting[app], n)
        self.waiters.update(f"{r.app}: {' '.join(r.query.split())}" for r in blocked)

    def summary(self) -> dict[str, Any]:
        return {"looks": self.looks, "a_idle_in_transaction": self.a_idle_in_transaction,
                "a_holding_row_locks": self.a_holding_row_locks,
                "tables": sorted(self.tables), "holders_last_statement": sorted(self.holders),
                "waiting_for_a_lock": dict(self.waiting), "waiters": sorted(self.waiters)}


# -- the load -------------------------------------------------------------------------------
def statuses(client: Hypha, run_ids: Sequence[str]) -> dict[str, str]:
    q = sa.select(runs_table.c.run_id, runs_table.c.status).where(
        runs_table.c.run_id.in_(list(run_ids)))
    with client.store.reader.connect() as conn:
        return {r.run_id: r.status for r in conn.execute(q)}


def drive_runs(c: Cluster, part: Partition, deadline: float) -> dict[str, Any]:
    """Start the runs (at most ``IN_FLIGHT`` unfinished), cut and heal on the way; until
    every run is terminal and the link is back. The expected result by run id."""
    expected: dict[str, Any] = {}
    done: set[str] = set()
    while len(done) < RUNS or not part.healed:
        while len(expected) < RUNS and len(expected) - len(done) < IN_FLIGHT:
            seed = len(expected)
            graph = "netns_fan" if seed % FAN_EVERY == FAN_EVERY - 1 else "netns_linear"
            expected[c.client.start(graph, {"seed": seed}).id] = netns.expected(graph, seed)
        pending = [r for r in expected if r not in done]
        if pending:
            done.update(r for r, s in statuses(c.client, pending).items() if s in TERMINAL)
        part.tick(len(done))
        if time.monotonic() > deadline:
            left = Counter(statuses(c.client, [r for r in expected if r not in done]).values())
            raise AssertionError(f"{RUNS - len(done)} runs unfinished ({left}), partition "
                                 f"{part.cut_at} - {part.healed_at}\n{c.tail()}")
        time.sleep(0.2)
    return expected


@dataclass
class Turns:
    """One thread per agent: tell a prompt, wait for its outcome (read unlocked from
    the agent's row), pause, tell the next."""

    client: Hypha
    names: list[str]
    deadline: float
    told: dict[str, tuple[str, str]] = field(default_factory=dict)  # ref -> (agent, prompt)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._threads = [threading.Thread(target=self._agent, args=(i, n), daemon=True,
                                          name=f"netns-turns-{i}")
                         for i, n in enumerate(self.names)]

    def start(self) -> Turns:
        for t in self._threads:
            t.start()
        return self

    def join(self) -> None:
        for t in self._threads:
            t.join(max(1.0, self.deadline - time.monotonic()))

    def _agent(self, i: int, name: str) -> None:
        try:
            time.sleep(i * STAGGER)
            for k in range(TURNS):
                prompt = f"{name}/{k}"
                ref = self.client.agents.tell(name, prompt)
                self.told[ref] = (name, prompt)
                while ref not in {o[0] for o in outcomes(self.client, name)}:
                    if time.monotonic() > self.deadline:
                        raise AssertionError(f"turn {prompt} ({ref}) did not end")
                    time.sleep(0.3)
                time.sleep((i * 7 + k * 3) % 10 / 10)  # 0-0.9 s between turns
        except Exception as exc:
            self.errors.append(f"{name}: {type(exc).__name__}: {exc}"[:300])


def outcomes(client: Hypha, name: str) -> list[list[Any]]:
    doc = agent_rows.read(client.store, name)
    return [] if doc is None else list(doc["state"]["outcomes"])


# -- the checks -----------------------------------------------------------------------------
def check_runs(client: Hypha, expected: dict[str, Any]) -> dict[str, list[Event]]:
    """Every run completed with its result; a well-formed log, every execution once."""
    logs: dict[str, list[Event]] = {}
    wrong: dict[str, Any] = {}
    for run_id, result in expected.items():
        view = client.store.get(run_id)
        if view["status"] != "completed" or view["result"] != result:
            wrong[run_id] = (view["status"], view["error"], view["result"])
            continue
        events = client.store.events(run_id)
        assert assert_well_formed(events).kind == "run.completed"
        assert_exactly_once(events)
        logs[run_id] = events
    assert not wrong, (len(wrong), list(wrong.items())[:5])
    return logs


def check_turns(client: Hypha, turns: Turns) -> Counter[str]:
    """Every told turn ended once: one outcome in the agent's state (its decision
    applied once) and one terminal turn event. Turn endings by kind."""
    assert len(turns.told) == AGENTS * TURNS, len(turns.told)
    endings: Counter[str] = Counter()
    for name in turns.names:
        refs = [ref for ref, (agent, _) in turns.told.items() if agent == name]
        got = outcomes(client, name)
        assert [o[0] for o in got] == refs, (name, got, refs)
        info = client.agents.whereis(name)
        assert info is not None
        events = client.store.events(info.incarnation)
        ends = Counter(e.data["ref"] for e in of_kind(events, "agent.turn.completed",
                                                      "agent.turn.failed"))
        assert ends == Counter(refs), (name, ends, refs)
        for kind, detail in ((o[1], o[2]) for o in got):
            endings["completed" if kind == "ok" else detail] += 1
            if kind == "ok":
                assert detail.startswith("done ")
    return endings


@dataclass(frozen=True)
class End:
    """A side record (:data:`netns.ENDS_ENV`): a node function or a turn's stream ended."""

    kind: str
    id: str
    host: str
    pid: int
    at: float


def ends(c: Cluster) -> list[End]:
    return [End(**json.loads(line)) for line in c.ends_file.read_text().splitlines()]


def applied_workers(logs: dict[str, list[Event]]) -> dict[str, int]:
    """The pid whose result each execution's log recorded (``node.execution.started``)."""
    return {e.data["execution_id"]: int(str(e.data["worker"]).rsplit(":", 1)[1])
            for events in logs.values() for e in of_kind(events, "node.execution.started")}


def fenced_nodes(records: list[End], logs: dict[str, list[Event]], host: str,
                 window: tuple[float, float]) -> tuple[int, int]:
    """(node results ``host`` produced within ``window``, those the log did not take:
    another process's result for the same execution was recorded)."""
    applied = applied_workers(logs)
    mine = [r for r in records if r.kind == "node" and r.host == host
            and window[0] < r.at < window[1]]
    return len(mine), sum(1 for r in mine if applied.get(r.id) not in (None, r.pid))


def fenced_turns(client: Hypha, records: list[End], turns: Turns, host: str,
                 window: tuple[float, float]) -> tuple[int, int]:
    """(turns whose stream ended on ``host`` within ``window``, those whose result was
    not the one recorded: the turn ended ``task_crashed`` when another owner took over)."""
    by_prompt = {prompt: (agent, ref) for ref, (agent, prompt) in turns.told.items()}
    mine = [r for r in records if r.kind == "turn" and r.host == host
            and window[0] < r.at < window[1]]
    fenced = 0
    for r in mine:
        agent, ref = by_prompt[r.id]
        (outcome,) = [o for o in outcomes(client, agent) if o[0] == ref]
        fenced += outcome[1] != "ok"
    return len(mine), fenced


def late_results(logs: Sequence[Sequence[Event]]) -> Counter[str]:
    return Counter(f"{e.kind}:{e.data.get('reason', '')}" for events in logs
                   for e in of_kind(events, "node.execution.late_result",
                                    "agent.turn.late_result"))


# -- the test -------------------------------------------------------------------------------
#: Celery keeps a result backend per thread (Redis' is not thread safe). The sweeper thread
#: re-drives fan-outs, so its backend subscribes to the edges' results; the AsyncResults it
#: made unsubscribe when they are collected, after the thread has ended, and the pub/sub
#: connection that reopens then is never closed (the test's supervisor thread's, not a
#: worker's: test_chaos's broker restart has the same).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_host_cut_off_mid_load_loses_and_duplicates_nothing(
        cluster: Cluster, tmp_path: Path, record_property: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    c = cluster
    began = time.monotonic()
    deadline = began + LOAD_LIMIT
    names = [f"rec-{i}-{uuid.uuid4().hex[:6]}" for i in range(AGENTS)]
    for name in names:
        c.client.agents.start(netns.Recorder, name=name, backend=netns.SlowBackend)
    part = Partition(c, c.hosts["a"])
    with Sweeper(c.rt) as sweeper:
        turns = Turns(c.client, names, deadline).start()
        expected = drive_runs(c, part, deadline)
        turns.join()
        load_s = time.monotonic() - began
        assert not turns.errors, (turns.errors[:5], c.tail())
        assert part.cut_at is not None and part.healed_at is not None
        # host a is back: it answers over the broker and has finished what it held
        wait_until(lambda: c.pong(c.of("a")), 60, "host a's workers to answer again", c.tail)
        wait_until(lambda: c.idle(c.of("a")), 60, "host a to finish its late work", c.tail)
    records = ends(c)
    (tmp_path / "cut.json").write_text(json.dumps([part.cut_at, part.healed_at]))
    logs = check_runs(c.client, expected)
    endings = check_turns(c.client, turns)
    cut = (part.cut_at, part.healed_at)
    a_nodes, a_nodes_fenced = fenced_nodes(records, logs, "a", cut)
    a_turns, a_turns_fenced = fenced_turns(c.client, records, turns, "a", cut)
    everything = (0.0, float("inf"))
    agent_logs = [c.client.store.events(info.incarnation) for name in names
                  if (info := c.client.agents.whereis(name)) is not None]
    summary = {
        "runs": len(logs), "turns": sum(endings.values()), "turn_endings": dict(endings),
        "cut_s": round(part.healed_at - part.cut_at, 1), "load_s": round(load_s, 1),
        "a_while_cut": {"node_results": a_nodes, "fenced": a_nodes_fenced,
                        "turn_results": a_turns, "turns_fenced": a_turns_fenced},
        "node_results_fenced_overall": {
            h: fenced_nodes(records, logs, h, everything)[1] for h in c.hosts},
        "node_results_by_host": dict(Counter(r.host for r in records if r.kind == "node")),
        "a_node_results_after_heal": sum(1 for r in records if r.kind == "node"
                                         and r.host == "a" and r.at >= part.healed_at),
        "late_result_events": dict(late_results([*logs.values(), *agent_logs])),
        "redriven": sum(len(of_kind(ev, "recovery.run.redriven")) for ev in logs.values()),
        "redelivered": sum(len(of_kind(ev, "node.execution.redelivered"))
                           for ev in logs.values()),
        "sweeps": dict(sweeper.actions()), "sweep_errors": len(sweeper.errors),
        "sweep_error_decisions": [d for d in sweeper.decisions if d["action"] == "error"],
        "longest_sweep_at_and_s": sweeper.longest(part.cut_at),
        "pg_during_cut": part.locks.summary(),
        "forwarded_pg_connections": c.forwarder.connections,
    }
    line = json.dumps(summary)
    record_property("netns_partition", line)
    with capsys.disabled():
        print(f"\n{line}")
    # the cut hit work in flight, and what host a finished while cut off was fenced (the
    # log took another delivery's result; host a's left no trace but its side record)
    assert a_nodes + a_turns > 0, summary
    assert a_nodes_fenced + a_turns_fenced > 0, summary
    assert not sweeper.errors, sweeper.errors[:5]
