"""Agent turns in flight at once on one machine: ``hypha worker --profile io`` (a thread
pool) against the default prefork profile, in the same run.

    .venv/bin/python bench/agents_io.py [--turns 600] [--prefork-turns 16] [--delay 2]
                                        [--clients 1200] [--clients-delay 10]

A local provider (``tests/fakes/llm_server.py`` run as a program, its own process) answers
every request after ``--delay`` seconds (the OpenAI Responses stream). For each profile,
in its own environment (a claimed Redis database, a fresh PostgreSQL database):

1. ONE worker is started with ``hypha worker --app bench.app:hypha --profile P``
   (``io``: gevent, 1,000, ``hypha.agents,hypha.io``; ``default``: prefork, CPU count, every
   queue) and serves ``WARMUP`` turns (imports, the SDK client, connections);
2. it stops consuming ``hypha.agents`` (``cancel_consumer``); ``--turns`` agents are
   started (``Relay``, ``OpenAIBackend`` pointed at the provider) and each is told one
   prompt: the pump messages wait in the broker; the worker consumes again
   (``add_consumer``): the burst arrives at once;
3. every 0.1 s: the requests the provider is answering (``GET /_stats``); every 0.5 s the
   worker's RSS (main process + pool children, psutil) and its thread count; until every
   turn ended.

Beside them, in the same run (issue 27):

* **the io profile on a thread pool** (``--only io-threads``: ``--pool threads``, the same
  concurrency and tuning): what gevent's pool saves against threads;

* **the raw SDK** (``--only raw-threads`` / ``raw-async``, a process of its own): as many
  chat calls at once through the official ``openai`` SDK, the sync client with a thread
  per call and ``AsyncOpenAI`` on one event loop, the same provider, delay and request:
  its CPU per call. Target: the io worker's CPU per turn at most 2 x the threads' per call;
* PostgreSQL's CPU per turn (its backends serving the bench database; the pools keep their
  connections, so none is lost between two readings: ``postgresql_new_sessions``) and
  Redis's (the server process: server-wide);
* **clients asking while the workers consume** (``--clients`` 1,200, ``--clients-delay``):
  that many idle agents are told one prompt each at the same moment by four client
  processes (fewer when PostgreSQL's ``max_connections`` cannot hold their pools beside
  the workers': 100, the default, holds two; a client process that fails ends the bench)
  while the io workers consume. Targets: peak in flight >= 1,000 and all ended within
  15 s. Beside it, the machine's own ceiling for that burst: the raw SDK making the same
  number of calls at once against the same provider and delay, from one process, with
  a connection pool that holds them all (the SDK's default holds 1,000): the sync client
  with a thread per call and ``AsyncOpenAI`` (``raw_sdk_same_calls``). Nothing hypha
  adds (the clients' tells, the broker, the store) is in it: no deployment on the machine
  ends the burst sooner than it.
* **the moonshot** (``--moonshot-clients`` 2,400, ``--moonshot-delay`` 30 s): the same
  with more clients and a provider slow enough that the first turns still wait when the
  last asks arrive (on 2 cores they take about 20 s to arrive). Target: peak in flight
  >= 2,000 (two io processes of 1,000 greenlets hold exactly that).

Reported per profile: ``peak_in_flight`` (the provider's own count of requests it was
answering at once: the number of turns waiting on the model together), the seconds from
the worker's start to that peak and to the last turn's end, turns completed / failed, and
the worker's RSS at the peak and at most. Target: io ``peak_in_flight`` >= 500 with the
default ``--turns``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import ROOT, BenchEnv, ModelServer, emit, machine_info, setup_info, target

TURNS = 600
PREFORK_TURNS = 16
DELAY = 2.0
TARGET_IN_FLIGHT = 500
#: Worker CPU per turn over the raw SDK's CPU per call (sync client, a thread per call).
TARGET_CPU_RATIO = 2.0
CLIENTS = 1200
CLIENTS_DELAY = 10.0
TARGET_CLIENTS_IN_FLIGHT = 1000
TARGET_CLIENTS_ENDED_S = 15.0
#: Issue 27's moonshot: 2,000 turns waiting on the provider at once on this machine. The
#: asks of 2,400 clients take longer to arrive on 2 cores than a 10 s answer, so the
#: provider answers after 30 s (a long completion) and the first turns still wait when
#: the last arrive.
MOONSHOT_CLIENTS = 2400
MOONSHOT_DELAY = 30.0
TARGET_MOONSHOT_IN_FLIGHT = 2000
#: Warm-up turns per worker, queued at once: 16 threads, so each of the SDK client cache's
#: ``SHARDS`` (8) thread groups has its client built before the clock starts, as the raw
#: side's one client is (a client built in the burst costs its TLS context, ~6 ms).
WARMUP = 16
AGENTS_QUEUE = "hypha.agents"
KEY = "sk-bench-local"
HYPHA = str(Path(sys.executable).with_name("hypha"))


#: The slow local provider, a process of its own (its threads do not share the driver's or
#: the worker's interpreter).
Provider = ModelServer


class ProfileEnv(BenchEnv):
    """:class:`BenchEnv` whose workers are ``hypha worker --profile P`` (``workers`` of
    them, each its own process tree), started on demand."""

    def __init__(self, profile: str, workers: int = 1, pool: str | None = None) -> None:
        super().__init__()
        self.profile = profile
        self.pool = pool
        self.nodes = [f"{self.db_name}-{i}" for i in range(workers)]
        self.procs: list[subprocess.Popen[bytes]] = []

    def argv(self, node: str) -> list[str]:
        return [HYPHA, "worker", "--app", "bench.app:hypha", "--profile", self.profile,
                "--loglevel", "WARNING", f"--hostname={node}@%h", "--without-gossip",
                "--without-mingle", *(["--pool", self.pool] if self.pool else [])]

    def _start_worker(self) -> None:
        return None  # see start_workers

    def start_workers(self) -> None:
        path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
        env = dict(os.environ, PYTHONPATH=path, OPENAI_API_KEY=KEY)
        log = self.log_path.open("wb")
        for node in self.nodes:
            self.procs.append(subprocess.Popen(self.argv(node), cwd=ROOT, env=env,
                                               stdout=log, stderr=subprocess.STDOUT))
        self.worker = self.procs[0]

    def _stop_worker(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def _processes(self) -> list[Any]:
        import psutil

        found = []
        for proc in self.procs:
            try:
                main = psutil.Process(proc.pid)
                found += [main, *main.children(recursive=True)]
            except psutil.Error:
                continue
        return found

    def memory(self) -> tuple[float, int]:
        """(RSS of the workers and their pool children in MB, their threads)."""
        import psutil

        rss, threads = 0.0, 0
        for p in self._processes():
            try:
                rss += p.memory_info().rss / 1024 / 1024
                threads += p.num_threads()
            except psutil.Error:
                continue
        return rss, threads

    def cpu_seconds(self) -> float:
        """User + system CPU time of the workers and their pool children so far."""
        import psutil

        total = 0.0
        for p in self._processes():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue
        return total

    @property
    def hypha(self) -> Any:
        assert self.app is not None
        return self.app.hypha

    def destinations(self) -> list[str]:
        return [f"{node}@{socket.gethostname()}" for node in self.nodes]

    def wait_ready(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        want = set(self.destinations())
        while time.monotonic() < end:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a worker exited early, see {self.log_path}")
            replies = self.hypha.celery.control.ping(destination=sorted(want), timeout=0.5)
            if {name for r in replies for name in r} >= want:
                return
        raise RuntimeError(f"workers not ready after {timeout}s, see {self.log_path}")

    def consume(self, on: bool) -> None:
        """Start or stop consuming the agents' queue (control commands, acknowledged)."""
        control = self.hypha.celery.control
        call = control.add_consumer if on else control.cancel_consumer
        replies = call(AGENTS_QUEUE, destination=self.destinations(), reply=True, timeout=10)
        assert len(replies) == len(self.nodes), replies


class ServiceCpu:
    """CPU seconds PostgreSQL spent for the bench database (its backends' processes, found
    in ``pg_stat_activity``; a backend that exits between two readings is lost, so the
    new connections, ``pg_stat_database.sessions``, are counted beside it) and Redis
    (the server's process: server-wide, whoever else uses that server)."""

    def __init__(self, h: Any) -> None:
        import psutil

        self.h = h
        self.redis = psutil.Process(int(h.celery.connection_for_write().default_channel
                                        .client.info("server")["process_id"]))
        self.seen: dict[int, float] = {}

    def _pg(self) -> tuple[dict[int, float], int]:
        import psutil

        with self.h.store.engine.connect() as conn:
            pids = [int(p) for (p,) in conn.exec_driver_sql(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")]
            conn.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
            sessions = int(conn.exec_driver_sql(
                "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
            ).scalar() or 0)
        cpu = {}
        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
                cpu[pid] = t.user + t.system
            except psutil.Error:
                continue
        return cpu, sessions

    def start(self) -> None:
        self.pg0, self.sessions0 = self._pg()
        t = self.redis.cpu_times()
        self.redis0 = t.user + t.system

    def stop(self, turns: int) -> dict[str, Any]:
        pg1, sessions1 = self._pg()
        pg = sum(v - self.pg0.get(pid, 0.0) for pid, v in pg1.items())
        t = self.redis.cpu_times()
        per = 1000 / max(1, turns)
        return {"postgresql_cpu_ms_per_turn": round(pg * per, 2),
                "postgresql_new_sessions": sessions1 - self.sessions0,
                "redis_cpu_ms_per_turn_server_wide": round(
                    (t.user + t.system - self.redis0) * per, 2)}


def _wait_ended(h: Any, turns: int, timeout: float) -> None:
    end = time.monotonic() + timeout
    while sum(_ended(h)) < turns:
        if time.monotonic() > end:
            raise RuntimeError("the warm-up turns did not end")
        time.sleep(0.2)


def _ended(h: Any, warm: int = 0) -> tuple[int, int]:
    """(completed, failed) agent turns in the store, less ``warm`` warm-up turns."""
    import sqlalchemy as sa

    with h.store.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT kind, count(*) FROM hypha_events WHERE kind IN "
            "('agent.turn.completed', 'agent.turn.failed') GROUP BY kind")).all()
    counts = {kind: int(n) for kind, n in rows}
    return counts.get("agent.turn.completed", 0) - warm, counts.get("agent.turn.failed", 0)


def _queue_turns(h: Any, provider: Provider, turns: int, prefix: str = "io") -> float:
    from bench.agents_app import Relay
    from hypha_celery.backends import OpenAIBackend

    def one(i: int) -> None:
        name = f"{prefix}-{i:05d}"
        h.agents.start(Relay, name=name, backend=OpenAIBackend, model="gpt-bench",
                       base_url=f"{provider.url}/v1")
        h.agents.tell(name, "hello")

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(turns)))
    return time.monotonic() - t0


@dataclass
class Burst:
    """What :func:`watch_burst` saw: the peak (in flight, at s, RSS MB, threads), the
    maxima, (completed, failed), a timeline [s, in flight, ended, RSS MB] and the time
    until all ended."""

    peak: tuple[int, float, float, int] = (0, 0.0, 0.0, 0)
    max_rss: float = 0.0
    max_threads: int = 0
    done: tuple[int, int] = (0, 0)
    timeline: list[list[float]] = field(default_factory=list)
    total_s: float = 0.0


#: Seconds between two samples of the workers' memory and threads (psutil walks /proc: the
#: observer must not load the machine it measures; the peak in flight is the provider's
#: own count, whatever the sampling).
MEMORY_EVERY_S = 0.5


def watch_burst(env: ProfileEnv, provider: Provider, n: int, delay: float,
                ended: Callable[[], tuple[int, int]]) -> Burst:
    """Every 0.1 s the provider's in-flight count, every ``MEMORY_EVERY_S`` the workers'
    memory, every 1 s ``ended()``, until ``n`` ended (or a generous deadline)."""
    seen = Burst()
    began, last_check, last_memory = time.monotonic(), 0.0, -MEMORY_EVERY_S
    rss, threads = 0.0, 0
    deadline = began + n * delay + 120
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = time.monotonic() - began
        flying = provider.stats()["in_flight"]
        if now - last_memory >= MEMORY_EVERY_S:
            last_memory = now
            rss, threads = env.memory()
        seen.max_rss, seen.max_threads = max(seen.max_rss, rss), max(seen.max_threads, threads)
        if flying > seen.peak[0]:
            seen.peak = (flying, now, rss, threads)
        if now - last_check >= 1.0:
            last_check = now
            seen.done = ended()
            seen.timeline.append([round(now, 1), flying, sum(seen.done), round(rss)])
            if sum(seen.done) >= n:
                break
    seen.total_s = time.monotonic() - began
    return seen


def measure(profile: str, turns: int, delay: float, workers: int,
            pool: str | None = None) -> dict[str, Any]:
    """The burst on ``workers`` workers of ``profile`` (on ``pool``: the profile's if
    None)."""
    os.environ["OPENAI_API_KEY"] = KEY  # start_session checks the key is there
    provider = Provider(delay)
    try:
        with ProfileEnv(profile, workers, pool) as env:
            h = env.hypha
            env.start_workers()
            env.wait_ready()
            # warm-up (imports, SDK client, pydantic adapters, connections), then the
            # burst queued while the worker does not consume, then consumed at once
            _queue_turns(h, provider, WARMUP * workers, "warm")
            _wait_ended(h, WARMUP * workers, 120)
            env.consume(False)
            queued_s = _queue_turns(h, provider, turns)
            services = ServiceCpu(h)
            services.start()
            cpu0 = env.cpu_seconds()
            env.consume(True)
            seen = watch_burst(env, provider, turns, delay,
                               lambda: _ended(h, WARMUP * workers))
            peak, max_rss, max_threads, done, timeline = (
                seen.peak, seen.max_rss, seen.max_threads, seen.done, seen.timeline)
            total_s = seen.total_s
            cpu = env.cpu_seconds() - cpu0
            service_cpu = services.stop(turns)
            served = provider.stats()
            info = setup_info(env)
            info["worker"] = f"{workers} x " + " ".join(env.argv(env.nodes[0])[1:])
            return {"setup": info, "workers": workers, "turns": turns,
                    "provider_delay_s": delay,
                    "worker_cpu_ms_per_turn": round(cpu * 1000 / max(1, turns), 2),
                    **service_cpu,
                    "queue_turns_s": round(queued_s, 2),
                    "peak_in_flight": served["max_in_flight"],
                    "peak_in_flight_sampled": peak[0],
                    "peak_at_s_after_worker_start": round(peak[1], 2),
                    "all_ended_s_after_worker_start": round(total_s, 2),
                    "completed": done[0], "failed": done[1],
                    "provider_requests": served["served"],
                    "worker_rss_mb_at_peak": round(peak[2], 1),
                    "worker_rss_mb_max": round(max_rss, 1),
                    "worker_threads_at_peak": peak[3], "worker_threads_max": max_threads,
                    "timeline_s_inflight_ended_rssmb": timeline}
    finally:
        provider.close()


# -- the raw SDK, same provider, same request ---------------------------------------------
def _raw_call_sync(client: Any) -> None:
    with client.responses.create(model="gpt-bench", stream=True,
                                 input=[{"role": "user", "content": "hello"}]) as stream:
        for _ in stream:
            pass


async def _raw_call_async(client: Any) -> None:
    stream = await client.responses.create(model="gpt-bench", stream=True,
                                           input=[{"role": "user", "content": "hello"}])
    async with stream:
        async for _ in stream:
            pass


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _raw_http(sync: bool, connections: int | None) -> dict[str, Any]:
    """The SDK client's own HTTP client (its defaults) unless ``connections`` is given:
    then one whose pool holds that many (the SDK's default pool holds 1,000 connections,
    a cap of its own on the calls in flight)."""
    import httpx
    import openai

    if connections is None:
        return {}
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=100)
    http = openai.DefaultHttpxClient if sync else openai.DefaultAsyncHttpxClient
    return {"http_client": http(limits=limits)}


def raw_burst(mode: str, calls: int, delay: float,
              connections: int | None = None) -> dict[str, Any]:
    """``calls`` chat calls at once from this process through the official ``openai`` SDK
    (``threads``: the sync client, one thread per call, as an io worker's pool runs them;
    ``async``: ``AsyncOpenAI`` on one event loop): this process's CPU per call, the
    provider's peak in flight and the time until the last call ended. ``connections``:
    the client's pool size (default: the SDK's, 1,000)."""
    import asyncio

    import openai

    provider = Provider(delay)
    try:
        base = f"{provider.url}/v1"
        if mode == "threads":
            client: Any = openai.OpenAI(api_key=KEY, base_url=base, max_retries=0,
                                        **_raw_http(True, connections))
            for _ in range(WARMUP):
                _raw_call_sync(client)
            cpu0, t0 = _own_cpu(), time.monotonic()
            with ThreadPoolExecutor(calls) as pool:
                list(pool.map(lambda _: _raw_call_sync(client), range(calls)))
        else:
            aclient: Any = openai.AsyncOpenAI(api_key=KEY, base_url=base, max_retries=0,
                                              **_raw_http(False, connections))

            async def burst(n: int) -> None:
                await asyncio.gather(*(_raw_call_async(aclient) for _ in range(n)))

            loop = asyncio.new_event_loop()
            loop.run_until_complete(burst(WARMUP))
            cpu0, t0 = _own_cpu(), time.monotonic()
            loop.run_until_complete(burst(calls))
            loop.close()
        cpu, total = _own_cpu() - cpu0, time.monotonic() - t0
        served = provider.stats()
        return {"mode": mode, "calls": calls, "provider_delay_s": delay,
                "cpu_ms_per_call": round(cpu * 1000 / calls, 2),
                "peak_in_flight": served["max_in_flight"],
                "all_ended_s": round(total, 2)}
    finally:
        provider.close()


# -- clients asking while the workers consume ----------------------------------------------
CLIENT_PROCESSES = 4
#: A margin of PostgreSQL connections for the bench's own and the server's other sessions.
CONNECTION_MARGIN = 10


def _client_processes(h: Any, workers: int) -> tuple[int, int]:
    """(client processes, the server's ``max_connections``): ``CLIENT_PROCESSES``, fewer
    when the workers' pools (both, operations.md "Sizing") and the clients' would not fit
    the server's connections (a client only tells: its main pool); at least 1."""
    import sqlalchemy as sa

    from hypha_celery.store.engine import POOL_SIZE, UNFLUSHED_POOL_SIZE

    with h.store.engine.connect() as conn:
        limit = int(conn.execute(sa.text("SHOW max_connections")).scalar_one())
        used, ours = conn.execute(sa.text(
            "SELECT count(*), count(*) FILTER (WHERE datname = current_database()) "
            "FROM pg_stat_activity")).one()
    more = max(0, workers * (POOL_SIZE + UNFLUSHED_POOL_SIZE) - int(ours))  # may open yet
    room = limit - int(used) - more - CONNECTION_MARGIN
    return max(1, min(CLIENT_PROCESSES, room // POOL_SIZE)), limit


def _watching(procs: list[subprocess.Popen[bytes]],
              ended: Callable[[], tuple[int, int]]) -> Callable[[], tuple[int, int]]:
    """``ended``, failing at once when a client process failed (its asks are lost: the
    burst would never end)."""
    def check() -> tuple[int, int]:
        failed = [p.returncode for p in procs if p.poll() not in (None, 0)]
        if failed:
            raise RuntimeError(f"a client process failed (exit {failed[0]}): see its "
                               "stderr above")
        return ended()

    return check


def _start_agents(h: Any, provider: Provider, n: int, prefix: str) -> None:
    from bench.agents_app import Relay
    from hypha_celery.backends import OpenAIBackend

    def one(i: int) -> None:
        h.agents.start(Relay, name=f"{prefix}-{i:05d}", backend=OpenAIBackend,
                       model="gpt-bench", base_url=f"{provider.url}/v1")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


def client_main(prefix: str, first: int, last: int, at: float) -> None:
    """One client process: at wall time ``at``, each of its agents is told one prompt,
    one thread per agent (the requests arrive at once while the workers consume)."""
    app = importlib.import_module("bench.app")
    h = app.hypha
    names = [f"{prefix}-{i:05d}" for i in range(first, last)]
    time.sleep(max(0.0, at - time.time()))
    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(lambda name: h.agents.tell(name, "hello"), names))
    h.close()


def _clients(prefix: str, n: int, at: float, processes: int) -> list[subprocess.Popen[bytes]]:
    step = -(-n // processes)
    path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
    env = dict(os.environ, PYTHONPATH=path)
    return [subprocess.Popen([sys.executable, __file__, "--client", prefix, str(a),
                              str(min(n, a + step)), repr(at)], cwd=ROOT, env=env)
            for a in range(0, n, step)]


def measure_clients(clients: int, delay: float, workers: int) -> dict[str, Any]:
    """``clients`` agents started (idle), then told one prompt each at the same moment by
    ``CLIENT_PROCESSES`` client processes (fewer where PostgreSQL's ``max_connections``
    would not hold their pools beside the workers') while ``workers`` io workers
    consume."""
    os.environ["OPENAI_API_KEY"] = KEY
    provider = Provider(delay)
    try:
        with ProfileEnv("io", workers) as env:
            h = env.hypha
            env.start_workers()
            env.wait_ready()
            _queue_turns(h, provider, WARMUP * workers, "warm")
            _wait_ended(h, WARMUP * workers, 120)
            _start_agents(h, provider, clients, "cl")
            services = ServiceCpu(h)
            processes, max_connections = _client_processes(h, workers)
            at = time.time() + 3.0  # the client processes import and connect first
            procs = _clients("cl", clients, at, processes)
            time.sleep(max(0.0, at - time.time()))
            services.start()
            cpu0 = env.cpu_seconds()
            seen = watch_burst(env, provider, clients, delay,
                               _watching(procs, lambda: _ended(h, WARMUP * workers)))
            cpu = env.cpu_seconds() - cpu0
            service_cpu = services.stop(clients)
            for proc in procs:
                proc.wait(60)
            served = provider.stats()
            return {"workers": workers, "clients": clients,
                    "client_processes": processes,
                    "postgresql_max_connections": max_connections, "provider_delay_s": delay,
                    "worker_cpu_ms_per_turn": round(cpu * 1000 / clients, 2),
                    **service_cpu,
                    "peak_in_flight": served["max_in_flight"],
                    "peak_at_s_after_asks": round(seen.peak[1], 2),
                    "all_ended_s_after_asks": round(seen.total_s, 2),
                    "completed": seen.done[0], "failed": seen.done[1],
                    "worker_rss_mb_max": round(seen.max_rss, 1),
                    "timeline_s_inflight_ended_rssmb": seen.timeline}
    finally:
        provider.close()


def measured(profile: str, argv: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, *argv, "--only", profile], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True, check=True)
    doc: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return doc


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=TURNS, help="io profile turns")
    parser.add_argument("--prefork-turns", type=int, default=PREFORK_TURNS,
                        help="default profile turns (prefork serves CPU-count at once)")
    parser.add_argument("--delay", type=float, default=DELAY)
    parser.add_argument("--io-workers", type=int, default=os.cpu_count() or 1,
                        help="io worker processes (default: one per CPU)")
    parser.add_argument("--clients", type=int, default=CLIENTS,
                        help="agents told one prompt each at once while the io workers "
                             "consume (0: skip)")
    parser.add_argument("--clients-delay", type=float, default=CLIENTS_DELAY,
                        help="the provider's delay in the clients phase")
    parser.add_argument("--moonshot-clients", type=int, default=MOONSHOT_CLIENTS,
                        help="the moonshot: as --clients, more of them (0: skip)")
    parser.add_argument("--moonshot-delay", type=float, default=MOONSHOT_DELAY,
                        help="the provider's delay in the moonshot")
    parser.add_argument("--raw-calls", type=int, default=0,
                        help="calls at once on the raw SDK side (default: --turns)")
    parser.add_argument("--only", choices=("io", "io-threads", "default", "clients",
                                           "raw-threads",
                                           "raw-async", "raw-clients-threads",
                                           "raw-clients-async"), help=argparse.SUPPRESS)
    if argv[:1] == ["--client"]:
        client_main(argv[1], int(argv[2]), int(argv[3]), float(argv[4]))
        return 0
    args = parser.parse_args(argv)
    if args.only in ("raw-threads", "raw-async"):
        print(json.dumps(raw_burst(args.only.removeprefix("raw-"),
                                   args.raw_calls or args.turns, args.delay)))
        return 0
    if args.only in ("raw-clients-threads", "raw-clients-async"):
        print(json.dumps(raw_burst(args.only.removeprefix("raw-clients-"), args.clients,
                                   args.clients_delay, connections=args.clients)))
        return 0
    if args.only == "clients":
        print(json.dumps(measure_clients(args.clients, args.clients_delay, args.io_workers)))
        return 0
    if args.only:  # one profile, in a process of its own (bench.app reads its env once)
        io = args.only.startswith("io")
        print(json.dumps(measure("io" if io else args.only,
                                 args.turns if io else args.prefork_turns, args.delay,
                                 args.io_workers if io else 1,
                                 "threads" if args.only == "io-threads" else None)))
        return 0
    t0 = time.monotonic()
    doc: dict[str, Any] = {"machine": machine_info()}
    raw_threads = measured("raw-threads", argv)
    io = measured("io", argv)
    io_threads = measured("io-threads", argv)
    raw_async = measured("raw-async", argv)
    default = measured("default", argv)
    doc["agents_io"] = {"io": io, "io_on_threads": io_threads, "default": default,
                        "raw_sdk_threads": raw_threads, "raw_sdk_async": raw_async}
    ratio = io["worker_cpu_ms_per_turn"] / raw_threads["cpu_ms_per_call"]
    doc["agents_io"]["cpu_ratio_turn_to_raw_threads"] = round(ratio, 2)
    doc["agents_io"]["cpu_ratio_turn_to_raw_async"] = round(
        io["worker_cpu_ms_per_turn"] / raw_async["cpu_ms_per_call"], 2)
    doc["targets"] = [target("agents_io_peak_turns_in_flight", io["peak_in_flight"], ">=",
                             TARGET_IN_FLIGHT),
                      target("agents_io_cpu_per_turn_over_raw_sdk", round(ratio, 2), "<=",
                             TARGET_CPU_RATIO)]
    if args.clients:
        clients = measured("clients", argv)
        clients["raw_sdk_same_calls"] = {
            mode: measured(f"raw-clients-{mode}", argv) for mode in ("threads", "async")}
        doc["agents_io"]["clients"] = clients
        doc["targets"] += [
            target("agents_io_clients_peak_in_flight", clients["peak_in_flight"], ">=",
                   TARGET_CLIENTS_IN_FLIGHT),
            target("agents_io_clients_all_ended_s", clients["all_ended_s_after_asks"], "<=",
                   TARGET_CLIENTS_ENDED_S)]
    if args.moonshot_clients:
        moon = measured("clients", [*argv, "--clients", str(args.moonshot_clients),
                                    "--clients-delay", str(args.moonshot_delay)])
        doc["agents_io"]["moonshot"] = moon
        doc["targets"].append(target("agents_io_moonshot_peak_in_flight",
                                     moon["peak_in_flight"], ">=", TARGET_MOONSHOT_IN_FLIGHT))
    doc["all_pass"] = all(t["pass"] for t in doc["targets"])
    doc["duration_s"] = round(time.monotonic() - t0, 1)
    emit("agents_io", doc)
    return 0


def _threads_rows(threads: dict[str, Any] | None) -> list[str]:
    """The same burst on the ``io`` profile with ``--pool threads`` (gevent's pool against
    a thread pool, the same tuning, in the same run)."""
    if not threads:
        return []
    return [f"| hypha agent turn, `io` workers on `--pool threads` | "
            f"{threads['worker_cpu_ms_per_turn']} | {threads['peak_in_flight']} | "
            f"{threads['all_ended_s_after_worker_start']} s |",
            f"| … PostgreSQL for it | {threads['postgresql_cpu_ms_per_turn']} | | |"]


def report_section(result: dict[str, Any]) -> str:
    """Markdown for ``bench/report.py``: CPU per turn against the raw SDK, in flight."""
    io, default = result["io"], result["default"]
    threads, aio = result["raw_sdk_threads"], result["raw_sdk_async"]
    lines = [
        f"{io['turns']} agent turns queued, then consumed at once by {io['workers']} "
        "`hypha worker --profile io` processes, against a local provider answering after "
        f"{io['provider_delay_s']} s; the official `openai` SDK making as many calls at "
        "once from one process, the same provider and delay, beside it. CPU is user + "
        "system of the processes named; PostgreSQL's is its backends serving the bench "
        "database, Redis's the whole server's (shared).",
        "",
        "| | CPU ms per call or turn | peak in flight | all ended after |",
        "|---|---:|---:|---:|",
        f"| raw SDK, sync client, a thread per call | {threads['cpu_ms_per_call']} | "
        f"{threads['peak_in_flight']} | {threads['all_ended_s']} s |",
        f"| raw SDK, `AsyncOpenAI`, one event loop | {aio['cpu_ms_per_call']} | "
        f"{aio['peak_in_flight']} | {aio['all_ended_s']} s |",
        f"| hypha agent turn, `io` workers (gevent) | {io['worker_cpu_ms_per_turn']} | "
        f"{io['peak_in_flight']} | {io['all_ended_s_after_worker_start']} s |",
        f"| … PostgreSQL for it | {io['postgresql_cpu_ms_per_turn']} | | |",
        f"| … Redis for it (server-wide) | {io['redis_cpu_ms_per_turn_server_wide']} | | |",
        *_threads_rows(result.get("io_on_threads")),
        f"| hypha, `default` profile (prefork, {default['turns']} turns) | "
        f"{default['worker_cpu_ms_per_turn']} | {default['peak_in_flight']} | "
        f"{default['all_ended_s_after_worker_start']} s |",
        "",
        f"Worker CPU per turn over the raw SDK's per call: "
        f"**{result['cpu_ratio_turn_to_raw_threads']}** (threads), "
        f"{result['cpu_ratio_turn_to_raw_async']} (async).",
    ]
    clients = result.get("clients")
    if clients:
        procs = clients["client_processes"]
        limit = clients.get("postgresql_max_connections")
        fit = f", as many as PostgreSQL's max_connections ({limit}) holds" if limit else ""
        lines += ["", f"**{clients['clients']} clients at once** ({procs} client "
                  f"process{'es' if procs != 1 else ''}{fit}, telling one prompt each to "
                  "idle agents while "
                  f"{clients['workers']} io workers consume; provider delay "
                  f"{clients['provider_delay_s']} s): {_burst_outcome(clients)}."]
        raw = clients.get("raw_sdk_same_calls")
        if raw:
            lines[-1] += (
                f" The raw SDK alone, the same {clients['clients']} calls at once from one "
                "process (a connection pool holding them all), the machine's ceiling for "
                f"this burst: all ended after {raw['threads']['all_ended_s']} s with a "
                f"thread per call ({raw['threads']['cpu_ms_per_call']} ms CPU a call), "
                f"{raw['async']['all_ended_s']} s with `AsyncOpenAI` "
                f"({raw['async']['cpu_ms_per_call']} ms).")
    return "\n".join(lines + _moonshot_lines(result.get("moonshot")))


def _moonshot_lines(moon: dict[str, Any] | None) -> list[str]:
    """The moonshot: more clients at once, a provider slow enough that the first turns
    still wait when the last asks arrive."""
    if not moon:
        return []
    return ["", f"**Moonshot: {moon['clients']} clients at once**, provider delay "
            f"{moon['provider_delay_s']} s (the asks take longer than a 10 s answer to "
            f"arrive on this machine), {moon['workers']} io workers: "
            f"{_burst_outcome(moon)}; {moon['completed']} completed, {moon['failed']} "
            f"failed, worker RSS at most {moon['worker_rss_mb_max']} MB."]


def _burst_outcome(burst: dict[str, Any]) -> str:
    """What a clients burst came to: its peak, its end, its CPU per turn."""
    return (f"peak {burst['peak_in_flight']} in flight, all ended "
            f"{burst['all_ended_s_after_asks']} s after the asks; worker CPU "
            f"{burst['worker_cpu_ms_per_turn']} ms, PostgreSQL "
            f"{burst['postgresql_cpu_ms_per_turn']} ms per turn")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
