"""Scale-out: the throughput curve over 1, 2 and 4 worker processes, the per-step counts
that decide a cluster's ceiling, and a model of where it saturates (issue 27, point 7).

Workers: ``N`` separate ``celery worker -P prefork -c 1`` process trees (each consuming
``hypha.coordinator,hypha.nodes,celery`` with ``-E``, as ``bench/_harness.py``'s one
worker), the closest this one machine gets to "N more hosts of one core each"
(``BENCH_SCALE_MODE=concurrency``: one worker with ``-c N`` instead). The machine has 2
cores shared by the workers, the driver, PostgreSQL and Redis: past 2 processes the curve
measures contention, not scale-out; the counts per step and the model are what carries
over to a cluster.

The worker counts are visited ``PASSES`` times (1, 2, 4, then 4, 2, 1: a drift of the
shared host's speed hits every count alike). A visit: a warm-up, then ``REPEATS`` rounds
of ``RUNS`` runs of ``bench_linear5`` started back to back until all completed
(``bench/throughput.py``'s ``start_and_wait``: runs/s and node executions ("steps")/s),
each followed by ``RUNS * 5`` raw Celery ``bench.noop`` tasks (tasks/s, the anchor), as
``bench/throughput.py`` does. Two variants,
each in a child interpreter with its own Redis server and database (``bench.app`` reads
the budget at import): ``local``, hypha as configured (fast consecutive nodes run as
zero-hop local steps within ``HYPHA_LOCAL_STEPS_BUDGET``, 0.05 s: a run's 5 no-op nodes
share one task), and ``hop``, ``HYPHA_LOCAL_STEPS_BUDGET=0``: one broker hop per step,
what every step costs when nodes are slower than the budget (a model call).

Counted per step (hypha) and per task (raw):

* **Redis**: a private ``redis-server`` on a free loopback port for this bench alone
  (nothing else talks to it, so every count is ours): ``INFO commandstats`` calls (total
  and per command; the bench's own ``INFO`` left out and the raw side's completion polls
  subtracted), ``INFO stats`` ``total_net_input_bytes`` / ``total_net_output_bytes``,
  ``INFO cpu`` (the server's CPU per step).
* **PostgreSQL**: ``pg_stat_database`` of the bench's private database: ``xact_commit +
  xact_rollback``, ``tup_inserted / tup_updated / tup_deleted`` (rows written),
  ``tup_returned / tup_fetched``. Backends flush these counters when a transaction ends
  but at most once a second, and an idle backend's pending counts only after
  ``PGSTAT_IDLE_INTERVAL`` (10 s, PostgreSQL 15): the bench sleeps ``PG_STATS_FLUSH_S``
  before each read (``pg_stat_clear_snapshot()`` first) and reads from a connection to
  another database, so its own queries are not counted. The ``pg_stat_database`` delta
  covers all rounds at a worker count (the raw rounds in between touch no PostgreSQL).
  ``pg_stat_wal.wal_bytes`` is server-wide (other sessions write too): informational.
* **PostgreSQL bytes on the wire**: from the kernel, not estimated. The client sockets of
  the database's connections (``pg_stat_activity.client_port``) are read with ``ss -ti``
  (``tcp_info`` ``bytes_sent`` / ``bytes_received``) before and after each round: exact
  TCP payload, both directions, driver and workers. Connections closed within a round
  would be lost (``pg_connections_closed`` counts them; hypha's pools keep theirs).
* **CPU** per step (psutil; Linux ticks of 10 ms, summed over thousands of steps): the
  worker process trees, the PostgreSQL backends of the database, the Redis server, the
  driver.

Then the ceilings, workers stopped: Redis with ``redis-benchmark`` (50 clients,
unpipelined, values of the size hypha's commands carry on average; pipelined 16 beside it)
and PostgreSQL with ``pgbench`` (1, 4 and 16 clients, 5 s each): a one-row durable
``INSERT`` commit, and a commit shaped like hypha's (one ``UPDATE`` of the client's row and
as many ``INSERT`` s as hypha writes rows per commit). The model divides them by the
per-step counts, and the servers' CPU (a core for Redis, this machine's cores for
PostgreSQL) by their CPU per step; each server's figure is the lower of its two.

    python -m bench.scale                      # ~15 min; bench/results/scale.json
    BENCH_SCALE_RUNS=100 BENCH_SCALE_REPEATS=2 BENCH_SCALE_WORKERS=1,2 \
        BENCH_SCALE_VARIANTS=hop python -m bench.scale

``bench(env)`` (for ``run_all``) runs the same in a child interpreter: ``bench.app``
binds its Redis URL at import, and this bench needs its own Redis server.
``report_section(result)`` renders the result as a section of docs/performance.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import (
    PG_ADMIN_URL,
    QUEUES,
    ROOT,
    BenchEnv,
    python_loop_ms,
    run_bench,
    summary,
)

NAME = "scale"
NODES = 5
GRAPH = "bench_linear5"
RUNS = int(os.environ.get("BENCH_SCALE_RUNS", "200"))
#: Rounds per visit of a worker count; the counts are visited PASSES times, in order then
#: in reverse, so REPEATS * PASSES rounds per point.
REPEATS = int(os.environ.get("BENCH_SCALE_REPEATS", "2"))
PASSES = int(os.environ.get("BENCH_SCALE_PASSES", "2"))
WORKER_COUNTS = tuple(int(x) for x in
                      os.environ.get("BENCH_SCALE_WORKERS", "1,2,4").split(","))
MODE = os.environ.get("BENCH_SCALE_MODE", "processes")  # or "concurrency"
#: PostgreSQL 15 backends flush their statistics at most once a second, and an idle
#: backend's pending counts after PGSTAT_IDLE_INTERVAL (10 s).
PG_STATS_FLUSH_S = 11.0
IDLE_WINDOW_S = 3.0
POLL = 0.01
TIMEOUT = 300.0
PGBENCH_CLIENTS = (1, 4, 16)
PGBENCH_SECONDS = 5
REDIS_BENCH_TESTS = "set,get,lpush,rpop,incr,hset"
ONE_GBIT_BYTES_PER_S = 125_000_000
TOP_COMMANDS = 8


# -- a private Redis server ----------------------------------------------------------


def _free_port() -> int:
    """A free loopback port below the kernel's ephemeral range (a port from the range
    could be taken by some outgoing connection between this check and the bind)."""
    for _ in range(200):
        port = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port in 20000-32000")


class PrivateRedis:
    """``redis-server`` on a free loopback port, nothing on disk; only this bench uses it."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: bench/scale.py needs a "
                               "private Redis server (its command counts are server-wide)")
        self.binary = binary
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="hypha-bench-scale-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> PrivateRedis:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--logfile", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.2):
                return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"redis-server did not listen on {self.port}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True,
                             check=False)
        return out.stdout.strip()


# -- N workers ------------------------------------------------------------------------


class ScaleEnv(BenchEnv):
    """The harness's environment on the private Redis server, with ``N`` worker process
    trees instead of one (:meth:`scale_to`)."""

    def __init__(self, redis_url: str) -> None:
        super().__init__()
        self.private_redis_url = redis_url
        self.workers: list[subprocess.Popen[bytes]] = []
        self.count = WORKER_COUNTS[0]

    def __enter__(self) -> ScaleEnv:
        # an explicit BENCH_REDIS_URL is flushed and used (it is our own server)
        os.environ.pop("BENCH_REDIS_CLAIMED", None)
        os.environ["BENCH_REDIS_URL"] = self.private_redis_url
        super().__enter__()
        return self

    def worker_command(self, index: int) -> list[str]:
        concurrency = self.count if MODE == "concurrency" else 1
        return [sys.executable, "-m", "celery", "-A", "bench.app:celery", "worker",
                "-P", "prefork", "-c", str(concurrency), "-Q", QUEUES, "-E",
                "--without-gossip", "--without-mingle", "--loglevel=WARNING",
                "-n", f"scale{index}-{self.db_name}@%h"]

    def _start_worker(self) -> None:
        path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
        env = dict(os.environ, PYTHONPATH=path)
        log = self.log_path.open("ab")
        processes = 1 if MODE == "concurrency" else self.count
        self.workers = [subprocess.Popen(self.worker_command(i), cwd=ROOT, env=env,
                                         stdout=log, stderr=subprocess.STDOUT)
                        for i in range(processes)]
        self.worker = self.workers[0]
        self._wait_ready()

    def _wait_ready(self, timeout: float = 90.0) -> None:
        assert self.app is not None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(w.poll() is not None for w in self.workers):
                raise RuntimeError(f"a worker exited early, see {self.log_path}")
            if len(self.app.celery.control.ping(timeout=0.5) or []) >= len(self.workers):
                self.app.add.delay(1, 1).get(timeout=30)
                return
        raise RuntimeError(f"workers not ready after {timeout}s, see {self.log_path}")

    def _stop_worker(self) -> None:
        for w in self.workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)  # warm shutdown
        for w in self.workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait(10)
        self.workers = []
        self.worker = None

    def scale_to(self, count: int) -> None:
        if count == self.count and self.workers:
            return
        self._stop_worker()
        self.count = count
        self._start_worker()

    def worker_cpu_s(self) -> float:
        """User + system CPU seconds of every worker process tree (main and pool)."""
        import psutil

        total = 0.0
        for w in self.workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                main = psutil.Process(w.pid)
                for p in (main, *main.children(recursive=True)):
                    with contextlib.suppress(psutil.NoSuchProcess):
                        t = p.cpu_times()
                        total += t.user + t.system
        return total


# -- counters -------------------------------------------------------------------------

_SS_LINE = re.compile(r"\S+:(\d+)\s+\S+:5432\b")
_SS_SENT = re.compile(r"\bbytes_sent:(\d+)")
_SS_RECEIVED = re.compile(r"\bbytes_received:(\d+)")
_PG_COUNTERS = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated",
                "tup_deleted", "tup_returned", "tup_fetched")


def _client_sockets() -> dict[int, tuple[int, int]]:
    """Established client sockets to port 5432: local port -> (bytes sent, received)."""
    out = subprocess.run(["ss", "-tinH", "state", "established", "( dport = :5432 )"],
                         capture_output=True, text=True, timeout=10, check=False).stdout
    sockets: dict[int, tuple[int, int]] = {}
    port: int | None = None
    for line in out.splitlines():
        head = _SS_LINE.search(line)
        if head and not line[:1].isspace():
            port = int(head.group(1))
            continue
        if port is not None:
            sent, received = _SS_SENT.search(line), _SS_RECEIVED.search(line)
            sockets[port] = (int(sent.group(1)) if sent else 0,
                             int(received.group(1)) if received else 0)
            port = None
    return sockets


@dataclass
class Snapshot:
    """Instant counters (Redis, sockets, CPU) at one moment."""

    redis_calls: dict[str, int]
    redis_usec: int
    redis_in: int
    redis_out: int
    redis_cpu_s: float
    pg_sockets: dict[int, tuple[int, int]]
    pg_backend_cpu_s: dict[int, float]
    worker_cpu_s: float
    driver_cpu_s: float


@dataclass
class Delta:
    """What one round cost (Redis, sockets, CPU), summed over rounds with :meth:`add`."""

    redis_calls: dict[str, int] = field(default_factory=dict)
    redis_usec: int = 0
    redis_in: int = 0
    redis_out: int = 0
    redis_cpu_s: float = 0.0
    pg_sent: int = 0
    pg_received: int = 0
    pg_connections_closed: int = 0
    pg_backend_cpu_s: float = 0.0
    worker_cpu_s: float = 0.0
    driver_cpu_s: float = 0.0

    def add(self, other: Delta) -> None:
        for k, v in other.redis_calls.items():
            self.redis_calls[k] = self.redis_calls.get(k, 0) + v
        for name in ("redis_usec", "redis_in", "redis_out", "redis_cpu_s", "pg_sent",
                     "pg_received", "pg_connections_closed", "pg_backend_cpu_s",
                     "worker_cpu_s", "driver_cpu_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


class Counters:
    """Reads the private Redis server, the bench database's statistics (from a connection
    to the admin database) and the processes' CPU."""

    def __init__(self, env: ScaleEnv) -> None:
        import psycopg
        import redis

        self.env = env
        self.redis = redis.Redis.from_url(env.private_redis_url)
        dsn = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
        self.pg = psycopg.connect(dsn, autocommit=True)

    def close(self) -> None:
        self.redis.close()
        self.pg.close()

    def backends(self) -> dict[int, int]:
        """The bench database's backends: pid -> client port."""
        rows = self.pg.execute(
            "SELECT pid, client_port FROM pg_stat_activity WHERE datname = %s "
            "AND client_port IS NOT NULL", (self.env.db_name,)).fetchall()
        return {int(pid): int(port) for pid, port in rows}

    def snapshot(self) -> Snapshot:
        import psutil

        info = self.redis.info("stats", "commandstats", "cpu")
        calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()
                 if k.startswith("cmdstat_")}
        usec = sum(int(v["usec"]) for k, v in info.items()
                   if k.startswith("cmdstat_") and k != "cmdstat_info")
        backends = self.backends()
        sockets = _client_sockets()
        cpu: dict[int, float] = {}
        for pid in backends:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                t = psutil.Process(pid).cpu_times()
                cpu[pid] = t.user + t.system
        me = psutil.Process().cpu_times()
        return Snapshot(
            redis_calls=calls, redis_usec=usec,
            redis_in=int(info["total_net_input_bytes"]),
            redis_out=int(info["total_net_output_bytes"]),
            redis_cpu_s=float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
            pg_sockets={p: sockets[p] for p in backends.values() if p in sockets},
            pg_backend_cpu_s=cpu, worker_cpu_s=self.env.worker_cpu_s(),
            driver_cpu_s=me.user + me.system)

    def pg_stats(self) -> dict[str, int]:
        """``pg_stat_database`` of the bench database and ``pg_stat_wal.wal_bytes``
        (server-wide), after waiting for the backends to flush."""
        time.sleep(PG_STATS_FLUSH_S)
        self.pg.execute("SELECT pg_stat_clear_snapshot()")
        row = self.pg.execute(
            f"SELECT {', '.join(_PG_COUNTERS)} FROM pg_stat_database WHERE datname = %s",
            (self.env.db_name,)).fetchone()
        assert row is not None
        out = {k: int(v) for k, v in zip(_PG_COUNTERS, row, strict=True)}
        wal = self.pg.execute("SELECT wal_bytes FROM pg_stat_wal").fetchone()
        out["wal_bytes_server_wide"] = int(wal[0]) if wal else 0
        return out


def delta(a: Snapshot, b: Snapshot) -> Delta:
    calls = {k: v - a.redis_calls.get(k, 0) for k, v in b.redis_calls.items()
             if k != "info" and v - a.redis_calls.get(k, 0) > 0}
    sent = received = 0
    for port, (s, r) in b.pg_sockets.items():
        s0, r0 = a.pg_sockets.get(port, (0, 0))
        sent, received = sent + s - s0, received + r - r0
    cpu = sum(v - a.pg_backend_cpu_s.get(pid, 0.0) for pid, v in b.pg_backend_cpu_s.items())
    return Delta(redis_calls=calls, redis_usec=b.redis_usec - a.redis_usec,
                 redis_in=b.redis_in - a.redis_in, redis_out=b.redis_out - a.redis_out,
                 redis_cpu_s=b.redis_cpu_s - a.redis_cpu_s, pg_sent=sent,
                 pg_received=received,
                 pg_connections_closed=len(set(a.pg_sockets) - set(b.pg_sockets)),
                 pg_backend_cpu_s=cpu, worker_cpu_s=b.worker_cpu_s - a.worker_cpu_s,
                 driver_cpu_s=b.driver_cpu_s - a.driver_cpu_s)


# -- the rounds -------------------------------------------------------------------------


def _hypha_round(env: ScaleEnv, runs: int) -> float:
    from bench.throughput import start_and_wait

    assert env.app is not None
    t0 = time.perf_counter()
    start_and_wait(env.app.hypha, GRAPH, runs)
    return time.perf_counter() - t0


def _raw_round(env: ScaleEnv, tasks: int) -> tuple[float, int]:
    """Wall seconds and the completion polls (one Redis ``GET`` each, subtracted later
    with the counter's ``SET``)."""
    app = env.app
    assert app is not None
    rds = app.counter_client()
    rds.set(app.COUNTER_KEY, 0)
    t0 = time.perf_counter()
    for _ in range(tasks):
        app.noop.apply_async()
    polls, end = 0, time.monotonic() + TIMEOUT
    while True:
        polls += 1
        if int(rds.get(app.COUNTER_KEY) or 0) >= tasks:
            break
        if time.monotonic() > end:
            raise TimeoutError("raw tasks did not complete")
        time.sleep(POLL)
    return time.perf_counter() - t0, polls


def _per(d: Delta, units: int) -> dict[str, Any]:
    """A round's (or rounds') counts per step or task."""
    total = sum(d.redis_calls.values())
    top = sorted(d.redis_calls.items(), key=lambda kv: -kv[1])[:TOP_COMMANDS]
    return {
        "redis_commands": round(total / units, 2),
        "redis_top_commands": {k: round(v / units, 3) for k, v in top},
        "redis_usec_in_commands": round(d.redis_usec / units, 2),
        # task messages published (kombu's Redis transport: one LPUSH each; events go by
        # PUBLISH)
        "celery_messages": round(d.redis_calls.get("lpush", 0) / units, 3),
        "redis_bytes_in": round(d.redis_in / units),
        "redis_bytes_out": round(d.redis_out / units),
        "pg_bytes_sent": round(d.pg_sent / units),
        "pg_bytes_received": round(d.pg_received / units),
        "cpu_ms_workers": round(1000 * d.worker_cpu_s / units, 3),
        "cpu_ms_pg_backends": round(1000 * d.pg_backend_cpu_s / units, 3),
        "cpu_ms_redis": round(1000 * d.redis_cpu_s / units, 3),
        "cpu_ms_driver": round(1000 * d.driver_cpu_s / units, 3),
    }


def _subtract_polls(d: Delta, polls: int) -> None:
    """The raw side's completion polls (``GET`` + one ``SET``) are the bench's, not Celery's."""
    d.redis_calls["get"] = max(0, d.redis_calls.get("get", 0) - polls)
    d.redis_calls["set"] = max(0, d.redis_calls.get("set", 0) - 1)


@dataclass
class Point:
    """One worker count's samples and counts, summed over its visits."""

    count: int
    processes: int = 0
    hypha_s: list[float] = field(default_factory=list)
    raw_s: list[float] = field(default_factory=list)
    hypha: Delta = field(default_factory=Delta)
    raw: Delta = field(default_factory=Delta)
    idle: Delta = field(default_factory=Delta)
    idle_s: float = 0.0
    pg: dict[str, int] = field(default_factory=dict)
    loop_ms: list[float] = field(default_factory=list)


def visit(env: ScaleEnv, counters: Counters, point: Point) -> None:
    """``REPEATS`` rounds at ``point.count`` workers, added to ``point``."""
    env.scale_to(point.count)
    point.processes = len(env.workers)
    tasks = RUNS * NODES
    _hypha_round(env, max(1, RUNS // 5))  # warm-up
    _raw_round(env, tasks // 5)
    point.loop_ms.append(python_loop_ms())  # how fast the host runs Python right now
    pg0 = counters.pg_stats()
    for _ in range(REPEATS):
        a = counters.snapshot()
        point.hypha_s.append(_hypha_round(env, RUNS))
        b = counters.snapshot()
        point.hypha.add(delta(a, b))
        wall, polls = _raw_round(env, tasks)
        d = delta(b, counters.snapshot())
        _subtract_polls(d, polls)
        point.raw_s.append(wall)
        point.raw.add(d)
    pg1 = counters.pg_stats()
    for k, v in pg1.items():
        point.pg[k] = point.pg.get(k, 0) + v - pg0[k]
    a = counters.snapshot()
    time.sleep(IDLE_WINDOW_S)
    point.idle.add(delta(a, counters.snapshot()))
    point.idle_s += IDLE_WINDOW_S


def summarize(p: Point) -> dict[str, Any]:
    """Throughput (median / min / max over the rounds) and the counts per step."""
    steps = RUNS * NODES
    rounds = len(p.hypha_s)
    steps_per_s = summary([steps / x for x in p.hypha_s], 1, 1)
    raw_per_s = summary([steps / x for x in p.raw_s], 1, 1)
    per_step = _per(p.hypha, steps * rounds)
    per_step.update(_pg_per_step(p.pg, steps * rounds, RUNS * rounds))
    per_step["pg_connections_closed_in_rounds"] = p.hypha.pg_connections_closed
    return {
        "workers": p.count, "worker_processes": p.processes,
        "pool_processes_per_worker": 1 if MODE == "processes" else p.count,
        "runs_per_s": summary([RUNS / x for x in p.hypha_s], 1, 1),
        "steps_per_s": steps_per_s, "raw_tasks_per_s": raw_per_s,
        "ratio": round(steps_per_s["median"] / raw_per_s["median"], 3),
        "per_step": per_step, "raw_per_task": _per(p.raw, steps * len(p.raw_s)),
        "pg_stat_database_delta": p.pg,
        "pg_commits_per_s_in_rounds": round(
            (p.pg["xact_commit"] + p.pg["xact_rollback"]) / sum(p.hypha_s), 1),
        "idle_redis_commands_per_s": round(sum(p.idle.redis_calls.values()) / p.idle_s, 1),
        "idle_worker_cpu_ms_per_s": round(1000 * p.idle.worker_cpu_s / p.idle_s, 1),
        "python_loop_ms_at_visits": p.loop_ms,
    }


def _pg_per_step(pg: dict[str, int], steps: int, runs: int) -> dict[str, Any]:
    xacts = pg["xact_commit"] + pg["xact_rollback"]
    written = pg["tup_inserted"] + pg["tup_updated"] + pg["tup_deleted"]
    return {
        "pg_transactions": round(xacts / steps, 3),
        "pg_commits": round(pg["xact_commit"] / steps, 3),
        "pg_rollbacks": round(pg["xact_rollback"] / steps, 3),
        "pg_rows_written": round(written / steps, 3),
        "pg_rows_inserted": round(pg["tup_inserted"] / steps, 3),
        "pg_rows_updated": round(pg["tup_updated"] / steps, 3),
        "pg_rows_deleted": round(pg["tup_deleted"] / steps, 3),
        "pg_rows_read": round((pg["tup_returned"] + pg["tup_fetched"]) / steps, 2),
        "pg_rows_written_per_commit": round(written / max(1, pg["xact_commit"]), 2),
        "pg_transactions_per_run": round(xacts / runs, 2),
    }


# -- ceilings ---------------------------------------------------------------------------


def redis_ceiling(port: int, value_bytes: int) -> dict[str, Any]:
    """``redis-benchmark`` against the private server (after the workers stopped)."""
    exe = shutil.which("redis-benchmark")
    if exe is None:
        return {"redis_benchmark": "not installed"}
    out: dict[str, Any] = {"value_bytes": value_bytes, "clients": 50,
                           "tests": REDIS_BENCH_TESTS}
    for pipeline in (1, 16):
        done = subprocess.run(
            [exe, "-h", "127.0.0.1", "-p", str(port), "-c", "50", "-n", "100000",
             "-d", str(value_bytes), "-P", str(pipeline), "-t", REDIS_BENCH_TESTS, "--csv"],
            capture_output=True, text=True, timeout=300, check=False)
        rates = {}
        for line in done.stdout.splitlines()[1:]:
            cells = [c.strip('"') for c in line.split(",")]
            if len(cells) > 1:
                with contextlib.suppress(ValueError):
                    rates[cells[0].lower()] = round(float(cells[1]))
        out[f"pipeline_{pipeline}_ops_per_s"] = rates
        if rates:
            out[f"pipeline_{pipeline}_median_ops_per_s"] = round(statistics.median(
                rates.values()))
    return out


_DOC = """'{"status": "running", "step": 3, "state": {"a": 1}}'"""
_SHAPED = """\\set r random(1, 100000)
BEGIN;
UPDATE scale_ceiling_runs SET seq = seq + 1, doc = {doc} WHERE id = :client_id;
{inserts}COMMIT;
"""
_INSERT = ("INSERT INTO scale_ceiling_events (run, seq, kind, data) "
           "VALUES (:client_id, :r, 'node.execution.completed', {doc});\n")
_ONE_ROW = _INSERT.replace(":r", "1")


def pg_ceiling(store_url: str, rows_per_commit: float) -> dict[str, Any]:
    """``pgbench`` in the bench database: a one-row durable ``INSERT`` commit, and a commit
    shaped like hypha's (one ``UPDATE`` of the client's projection-like row and
    ``rows_per_commit - 1`` event-like ``INSERT`` s), for 1, 4 and 16 clients."""
    import psycopg
    import sqlalchemy as sa

    exe = shutil.which("pgbench")
    url = sa.engine.make_url(store_url)
    inserts = max(0, round(rows_per_commit) - 1)
    out: dict[str, Any] = {"shaped_commit": f"1 UPDATE + {inserts} INSERT",
                           "seconds_each": PGBENCH_SECONDS}
    if exe is None:
        out["pgbench"] = "not installed"
        return out
    dsn = store_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE scale_ceiling_events (id bigserial PRIMARY KEY, run int, "
                     "seq int, kind text, data jsonb)")
        conn.execute("CREATE INDEX ON scale_ceiling_events (run, seq)")
        conn.execute("CREATE TABLE scale_ceiling_runs (id int PRIMARY KEY, seq int, doc jsonb)"
                     " WITH (fillfactor = 80)")
        conn.execute("INSERT INTO scale_ceiling_runs SELECT g, 0, '{}' "
                     "FROM generate_series(1, 64) g")
        row = conn.execute("SHOW synchronous_commit").fetchone()
        out["synchronous_commit"] = str(row[0]) if row else None
    scripts = {"one_row_insert": _ONE_ROW.format(doc=_DOC),
               "shaped": _SHAPED.format(doc=_DOC, inserts=_INSERT.format(doc=_DOC) * inserts)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in scripts.items():
            path = Path(tmp) / f"{name}.sql"
            path.write_text(text)
            for clients in PGBENCH_CLIENTS:
                out[f"{name}_{clients}_clients_commits_per_s"] = _pgbench(exe, url, path,
                                                                          clients)
    return out


def _pgbench(exe: str, url: Any, script: Path, clients: int) -> float | str:
    done = subprocess.run(
        [exe, "-n", "-h", url.host or "127.0.0.1", "-p", str(url.port or 5432),
         "-U", url.username or "postgres", "-f", str(script), "-c", str(clients),
         "-j", str(min(clients, 2)), "-T", str(PGBENCH_SECONDS), url.database],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PGPASSWORD": url.password or ""})
    tps = [line for line in done.stdout.splitlines() if line.startswith("tps = ")]
    return round(float(tps[0].split()[2])) if tps else done.stderr.strip()[-300:]


# -- the model ------------------------------------------------------------------------------


def _best(ceiling: dict[str, Any], prefix: str) -> float:
    rates = [v for k, v in ceiling.items()
             if k.startswith(prefix) and isinstance(v, int | float)]
    return float(max(rates)) if rates else 0.0


def model(points: list[dict[str, Any]], pg: dict[str, Any],
          rds: dict[str, Any], cores: int) -> dict[str, Any]:
    """Per-step counts (medians over the worker counts) against the measured ceilings of
    servers like this machine's (``cores`` cores for PostgreSQL, one core for Redis)."""

    def med(key: str) -> float:
        return float(statistics.median(p["per_step"][key] for p in points))

    def rate(capacity: float, cost: float) -> float:
        return capacity / cost if capacity > 0 and cost > 0 else 0.0

    commits, redis_cmds = med("pg_transactions"), med("redis_commands")
    pg_shaped = _best(pg, "shaped_")
    redis_ops = float(rds.get("pipeline_1_median_ops_per_s", 0))
    redis_cpu_ms, worker_cpu_ms = med("cpu_ms_redis"), med("cpu_ms_workers")
    pg_cpu_ms = med("cpu_ms_pg_backends")
    wire = (med("redis_bytes_in") + med("redis_bytes_out") + med("pg_bytes_sent")
            + med("pg_bytes_received"))
    pg_commit_steps = rate(pg_shaped, commits)
    pg_cpu_steps = rate(cores * 1000.0, pg_cpu_ms)
    redis_ops_steps = rate(redis_ops, redis_cmds)
    redis_cpu_steps = rate(1000.0, redis_cpu_ms)
    pg_limit = min((x for x in (pg_commit_steps, pg_cpu_steps) if x > 0), default=0.0)
    redis_limit = min((x for x in (redis_ops_steps, redis_cpu_steps) if x > 0), default=0.0)
    first = "postgresql" if pg_limit and (not redis_limit or pg_limit <= redis_limit) \
        else "redis"
    ceiling = min((x for x in (pg_limit, redis_limit) if x > 0), default=0.0)
    best = max(points, key=lambda p: p["steps_per_s"]["median"])
    one_client = float(pg.get("one_row_insert_1_clients_commits_per_s") or 0)
    return {
        "pg_commit_ms_one_client": round(rate(1000.0, one_client), 2),
        "process_steps_per_s_commit_bound": round(rate(one_client, commits)),
        "pg_transactions_per_step": round(commits, 3),
        "pg_rows_written_per_step": round(med("pg_rows_written"), 3),
        "pg_commit_ceiling_shaped_per_s": pg_shaped,
        "pg_commit_ceiling_one_row_per_s": _best(pg, "one_row_insert_"),
        "pg_carries_steps_per_s_commits": round(pg_commit_steps),
        "pg_backend_cpu_ms_per_step": round(pg_cpu_ms, 3),
        "pg_carries_steps_per_s_per_core_cpu": round(rate(1000.0, pg_cpu_ms)),
        "pg_cores": cores,
        "pg_carries_steps_per_s_cpu": round(pg_cpu_steps),
        "pg_carries_steps_per_s": round(pg_limit),
        "redis_commands_per_step": round(redis_cmds, 2),
        "celery_messages_per_step": round(med("celery_messages"), 3),
        "redis_ops_ceiling_per_s": redis_ops,
        "redis_carries_steps_per_s_ops": round(redis_ops_steps),
        "redis_cpu_ms_per_step": round(redis_cpu_ms, 3),
        "redis_carries_steps_per_s_cpu": round(redis_cpu_steps),
        "redis_carries_steps_per_s": round(redis_limit),
        "worker_cpu_ms_per_step": round(worker_cpu_ms, 3),
        "steps_per_s_per_worker_core": round(rate(1000.0, worker_cpu_ms)),
        "worker_cores_to_saturate": round(ceiling * worker_cpu_ms / 1000, 1),
        "wire_bytes_per_step": round(wire),
        "one_gbit_link_carries_steps_per_s": round(rate(ONE_GBIT_BYTES_PER_S, wire)),
        "saturates_first": first,
        "cluster_ceiling_steps_per_s": round(ceiling),
        "measured_best_steps_per_s": best["steps_per_s"]["median"],
        "measured_best_at_workers": best["workers"],
    }


# -- the bench ------------------------------------------------------------------------------


#: What each variant sets in the driver's and the workers' environment: ``local`` is
#: hypha as configured (consecutive fast nodes run as zero-hop local steps within
#: ``HYPHA_LOCAL_STEPS_BUDGET``, 0.05 s: the 5 no-op nodes of a run share one task);
#: ``hop`` is one broker hop per step (``HYPHA_LOCAL_STEPS_BUDGET=0``), what nodes slower
#: than the budget (a model call) cost.
VARIANTS: dict[str, dict[str, str]] = {"local": {}, "hop": {"HYPHA_LOCAL_STEPS_BUDGET": "0"}}
CHOSEN = tuple(os.environ.get("BENCH_SCALE_VARIANTS", "local,hop").split(","))


def measure() -> dict[str, Any]:
    """One variant's curve, in this interpreter: its own Redis server and database."""
    with PrivateRedis() as server, ScaleEnv(server.url) as env:
        counters = Counters(env)
        try:
            acc = {n: Point(n) for n in WORKER_COUNTS}
            for k in range(PASSES):  # 1, 2, 4 then 4, 2, 1: drift hits every count alike
                for n in WORKER_COUNTS if k % 2 == 0 else WORKER_COUNTS[::-1]:
                    visit(env, counters, acc[n])
            points = [summarize(acc[n]) for n in WORKER_COUNTS]
        finally:
            counters.close()
        assert env.app is not None
        return {"local_steps_budget_s": env.app.hypha.settings.local_budget,
                "points": points,
                "worker": " ".join(env.worker_command(0)[2:]).replace(env.db_name, "<db>"),
                "redis": f"private {server.version()}",
                "foreign_messages_in_worker_log": env.foreign_messages()}


def _child(variant: str) -> dict[str, Any]:
    """:func:`measure` in a child interpreter (``bench.app`` reads the budget at import)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{variant}.json"
        environ = {k: v for k, v in os.environ.items()
                   if k not in ("BENCH_REDIS_URL", "BENCH_REDIS_CLAIMED", "BENCH_STORE_URL",
                                "HYPHA_LOCAL_STEPS_BUDGET")}
        environ.update(VARIANTS[variant])
        # stdout is the parent's JSON document (run_all.py reads it): the child's goes to
        # stderr
        subprocess.run([sys.executable, "-m", "bench.scale", "--measure", str(out)],
                       cwd=ROOT, env=environ, check=True, stdout=sys.stderr)
        result: dict[str, Any] = json.loads(out.read_text())
    return result


@contextlib.contextmanager
def _scratch_database() -> Any:
    """A private PostgreSQL database for the ``pgbench`` ceilings, dropped at the end."""
    import sqlalchemy as sa

    name = f"hypha_bench_scale_{os.getpid()}_{random.randrange(16**6):06x}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        base, _, _ = PG_ADMIN_URL.rpartition("/")
        yield f"{base}/{name}"
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def ceilings(variants: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Redis's and PostgreSQL's ceilings, nothing else of the bench running; the value
    size and the commit's shape are the measured medians over every point."""
    points = [p for v in variants.values() for p in v["points"]]
    value = statistics.median(p["per_step"]["redis_bytes_in"]
                              / max(1.0, p["per_step"]["redis_commands"]) for p in points)
    rows = statistics.median(p["per_step"]["pg_rows_written_per_commit"] for p in points)
    with PrivateRedis() as server:
        rds = redis_ceiling(server.port, max(3, int(value)))
    with _scratch_database() as url:
        pg = pg_ceiling(url, rows)
    return rds, pg


def run() -> dict[str, Any]:
    """Every variant's curve (each in a child interpreter), the ceilings, the models."""
    variants = {name: _child(name) for name in CHOSEN}
    rds, pg = ceilings(variants)
    for v in variants.values():
        v["model"] = model(v["points"], pg, rds, os.cpu_count() or 1)
    first = next(iter(variants.values()))
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "hypha_celery"],
                           capture_output=True, text=True, check=False).stdout.strip()
    setup = {"hypha_commit": commit, "hypha_uncommitted_changes": bool(dirty),
             "mode": MODE, "worker_counts": list(WORKER_COUNTS), "runs_per_round": RUNS,
             "nodes_per_run": NODES, "graph": GRAPH, "repeats": REPEATS, "passes": PASSES,
             "worker": first["worker"], "redis": first["redis"], "nproc": os.cpu_count(),
             "variants": {k: VARIANTS[k] for k in variants}}
    return {"setup": setup, "variants": variants, "redis_ceiling": rds, "pg_ceiling": pg,
            "targets": [], "notes": NOTES}


NOTES = ("steps = node executions; per-step counts are over the hypha rounds (driver and "
         "workers: starting, executing, completing, the completion wake-ups); Redis counts "
         "are exact (a private server; the bench's INFO calls and the raw side's completion "
         "polls left out); PostgreSQL bytes are TCP payload from the kernel's tcp_info of "
         "the database's client sockets; wal_bytes is server-wide (other sessions write "
         "too); the machine's cores are shared by everything, so the curve past nproc "
         "workers measures contention.")


def bench(env: BenchEnv | None = None) -> dict[str, Any]:
    """``run_all``'s entry: the same measurement in a child interpreter (``env``'s app is
    bound to the shared Redis database; this bench needs its own server)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scale.json"
        environ = {k: v for k, v in os.environ.items()
                   if k not in ("BENCH_REDIS_URL", "BENCH_REDIS_CLAIMED", "BENCH_STORE_URL")}
        subprocess.run([sys.executable, "-m", "bench.scale", "--out", str(out)], cwd=ROOT,
                       env=environ, check=True, stdout=subprocess.DEVNULL)
        result: dict[str, Any] = json.loads(out.read_text())
    return result


# -- the docs section -------------------------------------------------------------------------


def _n(x: Any, digits: int = 0) -> str:
    if x is None:
        return "–"
    if isinstance(x, int | float):
        return f"{x:,.{digits}f}"
    return str(x)


_VARIANT_TEXT = {
    "local": "hypha as configured: the 5 fast nodes of a run are zero-hop local steps of one "
             "task (`HYPHA_LOCAL_STEPS_BUDGET` 0.05 s)",
    "hop": "one broker hop per step (`HYPHA_LOCAL_STEPS_BUDGET=0`): what every step costs "
           "when nodes are slower than the budget, e.g. a model call",
}


def report_section(result: dict[str, Any]) -> str:
    """A markdown section for docs/performance.md from ``bench()``'s result (or the whole
    ``bench/results/scale.json`` document)."""
    r = result.get(NAME, result)
    s, variants = r["setup"], r["variants"]
    lines = [
        "### Scale-out: the curve and where it saturates",
        "",
        f"`bench/scale.py`: `{s['graph']}` ({s['nodes_per_run']} no-op nodes), "
        f"{s['runs_per_round']} runs started back to back per round, "
        f"{s['repeats'] * s.get('passes', 1)} rounds per point (the worker counts visited "
        f"{s.get('passes', 1)} times, in order then in reverse), each round followed by "
        f"{_n(s['runs_per_round'] * s['nodes_per_run'])} raw Celery no-op tasks (`bench.noop`) "
        "on the same workers, the anchor; medians. A worker is one "
        "`celery worker -P prefork -c 1` process tree (mode "
        f"`{s['mode']}`), the nearest thing on one machine to one more one-core host. "
        f"**This machine has {s['nproc']} cores**, shared by the workers, the driver, "
        "PostgreSQL and Redis: past 2 workers the curve shows contention, not scale-out; the "
        "per-step counts and the model are what carry over to a cluster. Two variants:",
        "",
        *[f"- `{k}`: {_VARIANT_TEXT.get(k, k)}." for k in variants],
        "",
        "| variant | workers | runs/s | steps/s | raw tasks/s | steps / raw | "
        "worker CPU ms/step | Python loop ms at the visits |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in variants.items():
        for p in v["points"]:
            loops = " / ".join(_n(x) for x in p.get("python_loop_ms_at_visits", []))
            lines.append(
                f"| `{name}` | {p['workers']} | {_n(p['runs_per_s']['median'], 1)} | "
                f"{_n(p['steps_per_s']['median'])} | {_n(p['raw_tasks_per_s']['median'])} | "
                f"{p['ratio']:.2f} | {_n(p['per_step']['cpu_ms_workers'], 2)} | "
                f"{loops or '–'} |")
    lines += [
        "",
        "The Python loop (`bench/_harness.py` `python_loop_ms`, 135 – 280 ms on this VM when "
        "it is quiet) times the host's speed at each visit of a point: a visit at several "
        "times that figure ran on a host slowed by other sessions' load, and so did its "
        "rounds.",
        "", *_counts_table(variants), "", *_ceiling_lines(r), ""]
    for name, v in variants.items():
        lines += [*_model_lines(name, v["model"], r), ""]
    lines.append(_verdict(r))
    return "\n".join(lines) + "\n"


def _counts_table(variants: dict[str, Any]) -> list[str]:
    cols = [(name, p) for name, v in variants.items() for p in v["points"]]
    head = ("| per node step | "
            + " | ".join(f"`{n}` {p['workers']} w" for n, p in cols) + " |")
    rows = [head, "|---|" + "---|" * len(cols)]
    keys = [("PostgreSQL transactions (commit + rollback)", "pg_transactions", 2),
            ("PostgreSQL rows written (ins + upd + del)", "pg_rows_written", 2),
            ("PostgreSQL rows read (returned + fetched)", "pg_rows_read", 1),
            ("PostgreSQL bytes client → server", "pg_bytes_sent", 0),
            ("PostgreSQL bytes server → client", "pg_bytes_received", 0),
            ("PostgreSQL backend CPU ms", "cpu_ms_pg_backends", 3),
            ("Redis commands", "redis_commands", 1),
            ("Redis bytes in / out", None, 0),
            ("Redis CPU ms", "cpu_ms_redis", 3),
            ("worker CPU ms", "cpu_ms_workers", 2)]
    for label, key, digits in keys:
        if key is None:
            cells = [f"{_n(p['per_step']['redis_bytes_in'])} / "
                     f"{_n(p['per_step']['redis_bytes_out'])}" for _, p in cols]
        else:
            cells = [_n(p["per_step"][key], digits) for _, p in cols]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    rows.append("")
    for name, v in variants.items():
        p = v["points"][0]
        top = p["per_step"]["redis_top_commands"]
        rows.append(f"Redis commands per step, most called (`{name}`, 1 worker): "
                    + ", ".join(f"`{k}` {c:.2f}" for k, c in top.items()) + ".")
    raw = next(iter(variants.values()))["points"][0]["raw_per_task"]
    rows.append(
        f"A raw no-op task costs {raw['redis_commands']:.1f} Redis commands and "
        f"{_n(raw['redis_bytes_in'] + raw['redis_bytes_out'])} bytes (with `-E` task "
        "events, as hypha's profile has them). Redis figures are exact (a private "
        "`redis-server` for the bench; its own `INFO` calls and the raw side's completion "
        "polls left out); PostgreSQL bytes are the TCP payload of the database's client "
        "sockets (the kernel's `tcp_info`, via `ss`); PostgreSQL counts are "
        "`pg_stat_database` deltas of the bench's own database, read after the backends' "
        "statistics flush.")
    return rows


def _ceiling_lines(r: dict[str, Any]) -> list[str]:
    pg, rds = r["pg_ceiling"], r["redis_ceiling"]
    pg_rates = ", ".join(f"{c} client{'s' if c > 1 else ''} "
                         f"{_n(pg.get(f'shaped_{c}_clients_commits_per_s'))}"
                         for c in PGBENCH_CLIENTS)
    one = ", ".join(f"{_n(pg.get(f'one_row_insert_{c}_clients_commits_per_s'))}"
                    for c in PGBENCH_CLIENTS)
    return [
        "**Ceilings of this machine's servers** (measured after the curve, nothing else of "
        "the bench running; the load generator shares the 2 cores):",
        "",
        f"- PostgreSQL, `pgbench`, a commit shaped like hypha's ({pg.get('shaped_commit')}): "
        f"{pg_rates} commits/s; a one-row `INSERT` commit: {one} "
        f"(`synchronous_commit` {pg.get('synchronous_commit')}).",
        f"- Redis, `redis-benchmark` ({rds.get('clients')} clients, "
        f"{rds.get('value_bytes')}-byte values, `{rds.get('tests')}`): median "
        f"{_n(rds.get('pipeline_1_median_ops_per_s'))} ops/s unpipelined, "
        f"{_n(rds.get('pipeline_16_median_ops_per_s'))} pipelined by 16.",
    ]


def _model_lines(name: str, m: dict[str, Any], r: dict[str, Any]) -> list[str]:
    first = "PostgreSQL" if m["saturates_first"] == "postgresql" else "Redis"
    return [
        f"**The model, `{name}`** (per-step counts: medians over the worker counts).",
        "",
        f"- PostgreSQL: {m['pg_transactions_per_step']:.2f} transactions and "
        f"{m['pg_rows_written_per_step']:.1f} rows written per step, so **a PostgreSQL doing "
        f"{_n(m['pg_commit_ceiling_shaped_per_s'])} commits/s carries "
        f"{_n(m['pg_carries_steps_per_s_commits'])} steps/s**. Its backends spend "
        f"{m['pg_backend_cpu_ms_per_step']:.3f} ms of CPU per step: "
        f"{_n(m['pg_carries_steps_per_s_per_core_cpu'])} steps/s per core, "
        f"{_n(m['pg_carries_steps_per_s_cpu'])} on {m['pg_cores']} cores.",
        f"- Redis: {m['redis_commands_per_step']:.1f} commands per step "
        f"({m['celery_messages_per_step']:.2f} Celery task messages per step), so **a Redis "
        f"doing {_n(m['redis_ops_ceiling_per_s'])} ops/s carries "
        f"{_n(m['redis_carries_steps_per_s_ops'])} steps/s**; by CPU, "
        f"{m['redis_cpu_ms_per_step']:.3f} ms per step, "
        f"{_n(m['redis_carries_steps_per_s_cpu'])} steps/s on its one core.",
        f"- Workers: {m['worker_cpu_ms_per_step']:.2f} ms of worker CPU per step, "
        f"{_n(m['steps_per_s_per_worker_core'])} steps/s per worker core; the ceiling below "
        f"takes about {_n(m['worker_cores_to_saturate'], 1)} worker cores. A pool process "
        "also waits for its commits one at a time: at "
        f"{_n(m.get('pg_commit_ms_one_client'), 1)} ms per durable commit (`pgbench`, one "
        f"client) it makes at most {_n(m.get('process_steps_per_s_commit_bound'))} steps/s "
        "however fast its CPU, so throughput needs concurrent processes (and their "
        "commits then share WAL flushes: group commit).",
        f"- Network: {_n(m['wire_bytes_per_step'])} bytes per step on the wire (Redis and "
        "PostgreSQL, both directions): a 1 Gbit/s link carries "
        f"{_n(m['one_gbit_link_carries_steps_per_s'])} steps/s.",
        f"- **{first} saturates first**: PostgreSQL at "
        f"{_n(m['pg_carries_steps_per_s'])} steps/s, Redis at "
        f"{_n(m['redis_carries_steps_per_s'])} (each the lower of its two figures above). "
        f"This machine, everything on {r['setup']['nproc']} cores, reached "
        f"{_n(m['measured_best_steps_per_s'])} steps/s (with {m['measured_best_at_workers']} "
        f"worker{'s' if m['measured_best_at_workers'] != 1 else ''}).",
    ]


def _verdict(r: dict[str, Any]) -> str:
    firsts = {v["model"]["saturates_first"] for v in r["variants"].values()}
    pg_first = firsts == {"postgresql"}
    return (
        "**What to scale, and the limit.** Workers share nothing but the broker and the "
        "store: add worker processes or hosts (each `celery worker` with `-c` = its cores) "
        "until the figure above; on this 2-core machine the workers' own CPU is the limit "
        "long before. Past it the lever is a faster server: cores, and for PostgreSQL the WAL "
        "disk and group commit (more concurrent committers). Sharding the store over several "
        "PostgreSQL servers is out of scope: "
        + ("**the single PostgreSQL is the cluster's ceiling**." if pg_first else
           "here Redis comes first in at least one variant; PostgreSQL's figure is the "
           "next ceiling, and the single PostgreSQL bounds the cluster once Redis is "
           "scaled (a faster server, or the broker and the result backend split apart).")
    )


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] in ("--out", "--measure"):
        result = run() if argv[0] == "--out" else measure()
        Path(argv[1]).write_text(json.dumps(result, indent=2) + "\n")
        return 0
    return run_bench(NAME, run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
