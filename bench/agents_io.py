"""Agent turns in flight at once on one machine: ``hypha worker --profile io`` (a thread
pool) against the default prefork profile, in the same run.

    .venv/bin/python bench/agents_io.py [--turns 600] [--prefork-turns 16] [--delay 2]

A local provider (``tests/fakes/llm_server.py`` run as a program, its own process) answers
every request after ``--delay`` seconds (the OpenAI Responses stream). For each profile,
in its own environment (a claimed Redis database, a fresh PostgreSQL database):

1. ``--turns`` agents are started (``Relay``, ``OpenAIBackend`` pointed at the provider),
   and each is told one prompt while no worker runs: the pump messages wait in the broker;
2. ONE worker is started with ``hypha worker --app bench.app:hypha --profile P``
   (``io``: threads, 500, ``hypha.agents,hypha.io``; ``default``: prefork, CPU count, every
   queue);
3. every 0.1 s: the requests the provider is answering (``GET /_stats``), the worker's RSS
   (main process + pool children, psutil) and its thread count, until every turn ended.

Reported per profile: ``peak_in_flight`` (the provider's own count of requests it was
answering at once: the number of turns waiting on the model together), the seconds from
the worker's start to that peak and to the last turn's end, turns completed / failed, and
the worker's RSS at the peak and at most. Target: io ``peak_in_flight`` >= 500 with the
default ``--turns``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._harness import ROOT, BenchEnv, emit, machine_info, setup_info, target

TURNS = 600
PREFORK_TURNS = 16
DELAY = 2.0
TARGET_IN_FLIGHT = 500
KEY = "sk-bench-local"
HYPHA = str(Path(sys.executable).with_name("hypha"))


class Provider:
    """The slow local provider, a process of its own (its threads do not share the
    driver's or the worker's interpreter)."""

    def __init__(self, delay: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.llm_server", "--port", "0", "--delay",
             str(delay), "--text", "ok"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.url}/_stats", timeout=5) as reply:
            doc: dict[str, int] = json.loads(reply.read())
        return doc

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


class ProfileEnv(BenchEnv):
    """:class:`BenchEnv` whose worker is ``hypha worker --profile P``, started on demand
    (after the turns are queued)."""

    def __init__(self, profile: str) -> None:
        super().__init__()
        self.profile = profile
        self.argv = [HYPHA, "worker", "--app", "bench.app:hypha", "--profile", profile,
                     "--loglevel", "WARNING", f"--hostname={self.db_name}@%h",
                     "--without-gossip", "--without-mingle"]

    def _start_worker(self) -> None:
        return None  # see start_worker

    def start_worker(self) -> None:
        path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
        env = dict(os.environ, PYTHONPATH=path, OPENAI_API_KEY=KEY)
        log = self.log_path.open("wb")
        self.worker = subprocess.Popen(self.argv, cwd=ROOT, env=env, stdout=log,
                                       stderr=subprocess.STDOUT)

    def memory(self) -> tuple[float, int]:
        """(RSS of the worker and its pool children in MB, their threads)."""
        import psutil

        assert self.worker is not None
        try:
            main = psutil.Process(self.worker.pid)
            procs = [main, *main.children(recursive=True)]
            return (sum(p.memory_info().rss for p in procs) / 1024 / 1024,
                    sum(p.num_threads() for p in procs))
        except psutil.Error:
            return 0.0, 0

    @property
    def hypha(self) -> Any:
        assert self.app is not None
        return self.app.hypha


def _ended(h: Any) -> tuple[int, int]:
    """(completed, failed) agent turns in the store."""
    import sqlalchemy as sa

    with h.store.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT kind, count(*) FROM hypha_events WHERE kind IN "
            "('agent.turn.completed', 'agent.turn.failed') GROUP BY kind")).all()
    counts = {kind: int(n) for kind, n in rows}
    return counts.get("agent.turn.completed", 0), counts.get("agent.turn.failed", 0)


def _queue_turns(h: Any, provider: Provider, turns: int) -> float:
    from bench.agents_app import Relay
    from hypha_celery.backends import OpenAIBackend

    def one(i: int) -> None:
        name = f"io-{i:05d}"
        h.agents.start(Relay, name=name, backend=OpenAIBackend, model="gpt-bench",
                       base_url=f"{provider.url}/v1")
        h.agents.tell(name, "hello")

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(turns)))
    return time.monotonic() - t0


def measure(profile: str, turns: int, delay: float) -> dict[str, Any]:
    os.environ["OPENAI_API_KEY"] = KEY  # start_session checks the key is there
    provider = Provider(delay)
    try:
        with ProfileEnv(profile) as env:
            h = env.hypha
            queued_s = _queue_turns(h, provider, turns)
            env.start_worker()
            began = time.monotonic()
            peak = (0, 0.0, 0.0, 0)  # (in flight, at s, rss MB, threads)
            max_rss, max_threads, done, last_check = 0.0, 0, (0, 0), 0.0
            deadline = began + turns * delay + 120
            while time.monotonic() < deadline:
                time.sleep(0.1)
                now = time.monotonic() - began
                flying = provider.stats()["in_flight"]
                rss, threads = env.memory()
                max_rss, max_threads = max(max_rss, rss), max(max_threads, threads)
                if flying > peak[0]:
                    peak = (flying, now, rss, threads)
                if now - last_check >= 1.0:
                    last_check = now
                    done = _ended(h)
                    if sum(done) >= turns:
                        break
            total_s = time.monotonic() - began
            served = provider.stats()
            info = setup_info(env)
            info["worker"] = " ".join(env.argv[1:])
            return {"setup": info, "turns": turns, "provider_delay_s": delay,
                    "queue_turns_s": round(queued_s, 2),
                    "peak_in_flight": served["peak"],
                    "peak_in_flight_sampled": peak[0],
                    "peak_at_s_after_worker_start": round(peak[1], 2),
                    "all_ended_s_after_worker_start": round(total_s, 2),
                    "completed": done[0], "failed": done[1],
                    "provider_requests": served["requests"],
                    "worker_rss_mb_at_peak": round(peak[2], 1),
                    "worker_rss_mb_max": round(max_rss, 1),
                    "worker_threads_at_peak": peak[3], "worker_threads_max": max_threads}
    finally:
        provider.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=TURNS, help="io profile turns")
    parser.add_argument("--prefork-turns", type=int, default=PREFORK_TURNS,
                        help="default profile turns (prefork serves CPU-count at once)")
    parser.add_argument("--delay", type=float, default=DELAY)
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    doc: dict[str, Any] = {"machine": machine_info()}
    io = measure("io", args.turns, args.delay)
    default = measure("default", args.prefork_turns, args.delay)
    doc["agents_io"] = {"io": io, "default": default}
    doc["targets"] = [target("agents_io_peak_turns_in_flight", io["peak_in_flight"], ">=",
                             TARGET_IN_FLIGHT)]
    doc["all_pass"] = all(t["pass"] for t in doc["targets"])
    doc["duration_s"] = round(time.monotonic() - t0, 1)
    emit("agents_io", doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
