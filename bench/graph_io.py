"""Graph-node model calls in flight at once on one machine: nodes that call a model
(``Node(models=[...])``, routed to ``hypha.io``) served by ``hypha worker --profile io``
(gevent's pool) against the default prefork profile, in the same run.

    .venv/bin/python bench/graph_io.py [--runs 600] [--prefork-runs 16] [--delay 2]

As ``bench/agents_io.py``, with graph runs instead of agent turns: a local provider (its
own process) answers every request after ``--delay`` seconds; each run of ``bench_llm``
(``bench/app.py``) is one node making one ``ctx.llm`` call. For each profile, in its own
environment (a claimed Redis database, a fresh PostgreSQL database):

* ``io``: ``--io-workers`` ``hypha worker --profile io`` processes (gevent, 1,000 each,
  ``hypha.agents,hypha.io``) and one ``--profile cpu`` worker (prefork, the coordinator);
* ``default``: one ``hypha worker --profile default`` (prefork, CPU count, every queue).

Warm-up runs first; then the io workers stop consuming ``hypha.io``, ``--runs`` runs are
started (their coordinator steps route the nodes to ``hypha.io``, where they wait), and
the workers consume again: the burst arrives at once. Every 0.1 s the requests the
provider is answering (its own count), every 0.5 s the workers' RSS and threads, until
every run ended. Target: io ``peak_in_flight`` >= 500 with the default ``--runs``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import ROOT, emit, machine_info, setup_info, target
from bench.agents_io import KEY, ProfileEnv, Provider, watch_burst

RUNS = 600
PREFORK_RUNS = 16
DELAY = 2.0
TARGET_IN_FLIGHT = 500
WARMUP = 4
IO_QUEUE = "hypha.io"


class GraphEnv(ProfileEnv):
    """``workers`` workers of ``profile``; with ``io``, one ``cpu`` worker beside them
    (the coordinator, which the ``io`` profile does not consume)."""

    def __init__(self, profile: str, workers: int = 1) -> None:
        super().__init__(profile, workers)
        self.io_nodes = list(self.nodes) if profile == "io" else []
        if profile == "io":
            self.nodes.append(f"{self.db_name}-cpu")

    def _load_app(self) -> Any:
        importlib.import_module("bench.app_io")  # bench_llm_noop beside bench.app's graphs
        return super()._load_app()

    def argv(self, node: str) -> list[str]:
        argv = super().argv(node)
        argv[argv.index("--app") + 1] = "bench.app_io:hypha"
        if node.endswith("-cpu"):
            argv[argv.index("--profile") + 1] = "cpu"
            argv.append("--concurrency=1")
        return argv

    def io_cpu_seconds(self) -> float:
        """User + system CPU time of the io workers (and their pool children) so far."""
        import psutil

        total = 0.0
        for proc in self.procs[:len(self.io_nodes)]:
            try:
                main = psutil.Process(proc.pid)
                for p in (main, *main.children(recursive=True)):
                    t = p.cpu_times()
                    total += t.user + t.system
            except psutil.Error:
                continue
        return total

    def consume_io(self, on: bool) -> None:
        control = self.hypha.celery.control
        call = control.add_consumer if on else control.cancel_consumer
        hosts = [d for d in self.destinations() if not d.split("@")[0].endswith("-cpu")]
        replies = call(IO_QUEUE, destination=hosts, reply=True, timeout=10)
        assert len(replies) == len(hosts), replies


def _ended(h: Any, warm: int = 0) -> tuple[int, int]:
    """(completed, failed) runs in the store, less ``warm`` warm-up runs."""
    import sqlalchemy as sa

    with h.store.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT kind, count(*) FROM hypha_events WHERE kind IN "
            "('run.completed', 'run.failed') GROUP BY kind")).all()
    counts = {kind: int(n) for kind, n in rows}
    return counts.get("run.completed", 0) - warm, counts.get("run.failed", 0)


def _wait_runs(h: Any, n: int, timeout: float) -> None:
    end = time.monotonic() + timeout
    while sum(_ended(h)) < n:
        if time.monotonic() > end:
            raise RuntimeError("the warm-up runs did not end")
        time.sleep(0.2)


def _start_runs(h: Any, n: int, graph: str = "bench_llm") -> float:
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: h.start(graph), range(n)))
    return time.monotonic() - t0


def _queued(h: Any) -> int:
    """Messages waiting in ``hypha.io`` (Redis: the list's length)."""
    with h.celery.connection_for_read() as conn:
        return int(conn.default_channel.client.llen(IO_QUEUE))


def measure(profile: str, runs: int, delay: float, workers: int) -> dict[str, Any]:
    os.environ["OPENAI_API_KEY"] = KEY
    provider = Provider(delay)
    os.environ["BENCH_LLM_URL"] = provider.url  # the workers' bench.app and the driver's
    try:
        with GraphEnv(profile, workers) as env:
            h = env.hypha
            env.start_workers()
            env.wait_ready()
            _start_runs(h, WARMUP * workers)
            _wait_runs(h, WARMUP * workers, 120)
            burst = profile == "io"
            if burst:
                env.consume_io(False)
            started_s = _start_runs(h, runs)
            if burst:  # every node waits in hypha.io, then arrives at once
                end = time.monotonic() + 120
                while _queued(h) < runs and time.monotonic() < end:
                    time.sleep(0.1)
            cpu0 = env.cpu_seconds()
            if burst:
                env.consume_io(True)
            return _observe(env, provider, runs, delay, workers, started_s, cpu0)
    finally:
        provider.close()


def _observe(env: GraphEnv, provider: Provider, runs: int, delay: float, workers: int,
             started_s: float, cpu0: float) -> dict[str, Any]:
    h = env.hypha
    seen = watch_burst(env, provider, runs, delay, lambda: _ended(h, WARMUP * workers))
    peak, done = seen.peak, seen.done
    served = provider.stats()
    info = setup_info(env)
    info["workers"] = [" ".join(env.argv(n)[1:]) for n in env.nodes]
    return {"setup": info, "io_workers": workers if env.io_nodes else 0, "runs": runs,
            "provider_delay_s": delay,
            "worker_cpu_ms_per_run": round((env.cpu_seconds() - cpu0) * 1000 / runs, 2),
            "start_runs_s": round(started_s, 2),
            "peak_in_flight": served["max_in_flight"],
            "peak_at_s_after_consuming": round(peak[1], 2),
            "all_ended_s_after_consuming": round(seen.total_s, 2),
            "completed": done[0], "failed": done[1], "provider_requests": served["served"],
            "worker_rss_mb_at_peak": round(peak[2], 1),
            "worker_rss_mb_max": round(seen.max_rss, 1),
            "worker_threads_at_peak": peak[3], "worker_threads_max": seen.max_threads,
            "timeline_s_inflight_ended_rssmb": seen.timeline}


# -- what a ctx.llm call costs the io worker -----------------------------------------------
CALL_RUNS = 200
CALL_ROUNDS = 3
#: ``ctx.llm``'s CPU at most this many times the raw SDK's per call, plus one store
#: transaction's.
TARGET_CALL_RATIO = 1.5


def _round(env: GraphEnv, graph: str, runs: int) -> float:
    """``runs`` runs of ``graph`` started at once while the workers consume: the io
    workers' CPU per run (ms)."""
    h = env.hypha
    done = sum(_ended(h))
    cpu0 = env.io_cpu_seconds()
    _start_runs(h, runs, graph)
    end = time.monotonic() + 300
    while sum(_ended(h)) < done + runs:
        if time.monotonic() > end:
            raise RuntimeError(f"{graph}: the runs did not end")
        time.sleep(0.1)
    return (env.io_cpu_seconds() - cpu0) * 1000 / runs


def _tx_cpu_ms(h: Any, count: int = 400) -> float:
    """This process's CPU for one store transaction that locks a run and appends one
    event (what ``ctx.llm`` adds to its node's step: the call's events)."""
    import uuid

    from bench.events import _append_run, _one_per_tx_locked

    run_id = uuid.uuid4().hex
    _append_run(h.store, run_id, 7 * 10**6, 2, 1000)
    _one_per_tx_locked(h.store, run_id, 50)  # warm
    t0 = time.process_time()
    _one_per_tx_locked(h.store, run_id, count)
    return (time.process_time() - t0) * 1000 / count


def measure_call(runs: int, delay: float, workers: int) -> dict[str, Any]:
    """``bench_llm`` against ``bench_llm_noop`` (the same node, no call), ``CALL_ROUNDS``
    interleaved rounds of ``runs`` each on the io workers: the call's CPU is the
    difference of the medians."""
    os.environ["OPENAI_API_KEY"] = KEY
    provider = Provider(delay)
    os.environ["BENCH_LLM_URL"] = provider.url
    try:
        with GraphEnv("io", workers) as env:
            env.start_workers()
            env.wait_ready()
            for graph in ("bench_llm", "bench_llm_noop"):
                _round(env, graph, WARMUP * workers)
            llm, noop = [], []
            for _ in range(CALL_ROUNDS):
                noop.append(_round(env, "bench_llm_noop", runs))
                llm.append(_round(env, "bench_llm", runs))
            tx = _tx_cpu_ms(env.hypha)
    finally:
        provider.close()
    call = statistics.median(llm) - statistics.median(noop)
    return {"runs_per_round": runs, "rounds": CALL_ROUNDS, "provider_delay_s": delay,
            "io_cpu_ms_per_run_with_call": [round(x, 2) for x in llm],
            "io_cpu_ms_per_run_without_call": [round(x, 2) for x in noop],
            "ctx_llm_cpu_ms_per_call": round(call, 2),
            "store_transaction_cpu_ms": round(tx, 3)}


def call_cost(argv: list[str]) -> dict[str, Any]:
    """``ctx.llm``'s CPU per call against the raw SDK's (sync client, a thread per call,
    the same provider and delay, as many calls at once)."""
    call = measured("call", argv)
    args = parser().parse_args(argv)
    raw = subprocess.run([sys.executable, str(Path(__file__).with_name("agents_io.py")),
                          "--only", "raw-threads", "--raw-calls", str(args.call_runs),
                          "--delay", str(args.delay)], cwd=ROOT, stdout=subprocess.PIPE,
                         text=True, check=True)
    raw_doc: dict[str, Any] = json.loads(raw.stdout.strip().splitlines()[-1])
    allowed = TARGET_CALL_RATIO * raw_doc["cpu_ms_per_call"] + call["store_transaction_cpu_ms"]
    ratio = (call["ctx_llm_cpu_ms_per_call"] - call["store_transaction_cpu_ms"]) / raw_doc[
        "cpu_ms_per_call"]
    return {"ctx_llm": call, "raw_sdk_threads": raw_doc,
            "allowed_ms": round(allowed, 2),
            "ratio_call_less_one_transaction_to_raw": round(ratio, 2),
            "targets": [target("graph_io_ctx_llm_cpu_over_raw_sdk_plus_one_tx",
                               round(ratio, 2), "<=", TARGET_CALL_RATIO)]}


def measured(profile: str, argv: list[str]) -> dict[str, Any]:
    """One profile measured in a process of its own (``bench.app`` reads its env once)."""
    done = subprocess.run([sys.executable, str(Path(__file__)), *argv, "--only", profile],
                          cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
    doc: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return doc


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=RUNS, help="io profile runs")
    p.add_argument("--prefork-runs", type=int, default=PREFORK_RUNS,
                   help="default profile runs (prefork serves CPU-count at once)")
    p.add_argument("--delay", type=float, default=DELAY)
    p.add_argument("--io-workers", type=int, default=os.cpu_count() or 1,
                   help="io worker processes (default: one per CPU)")
    p.add_argument("--call-runs", type=int, default=CALL_RUNS,
                   help="runs per round of the ctx.llm CPU measurement (0: skip it)")
    p.add_argument("--only", choices=("io", "default", "call"), help=argparse.SUPPRESS)
    return p


def both(argv: list[str]) -> dict[str, Any]:
    io = measured("io", argv)
    default = measured("default", argv)
    return {"io": io, "default": default,
            "targets": [target("graph_io_peak_model_calls_in_flight", io["peak_in_flight"],
                               ">=", TARGET_IN_FLIGHT)]}


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.only == "call":
        print(json.dumps(measure_call(args.call_runs, args.delay, args.io_workers)))
        return 0
    if args.only:
        io = args.only == "io"
        print(json.dumps(measure(args.only, args.runs if io else args.prefork_runs,
                                 args.delay, args.io_workers if io else 1)))
        return 0
    t0 = time.monotonic()
    doc: dict[str, Any] = {"machine": machine_info()}
    doc["graph_io"] = both(argv)
    doc["targets"] = doc["graph_io"].pop("targets")
    if parser().parse_args(argv).call_runs:
        doc["graph_io"]["call"] = call_cost(argv)
        doc["targets"] += doc["graph_io"]["call"].pop("targets")
    doc["all_pass"] = all(t["pass"] for t in doc["targets"])
    doc["duration_s"] = round(time.monotonic() - t0, 1)
    emit("graph_io", doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
