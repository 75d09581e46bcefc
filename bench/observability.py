"""Observability: what tracing and metrics cost per step, A/B in one run.

Two worker process trees side by side, each on a Redis database and a PostgreSQL database
of its own and each with a client of its own, built the same way but for the middleware:
A (off) has none but the built-in ones; B (on) has ``BENCH_OBSERVE=1``
(:func:`bench.app.observers`: ``TracingMiddleware`` on an SDK ``TracerProvider`` with a
``BatchSpanProcessor``, and ``PrometheusMiddleware``), in the worker and the client. Both
run the same 20-node linear graph as ``linear``, in interleaved rounds (A B, then B A,
so order and drift hit both sides alike); each side's worker idles while the other works
(the bench environment's own worker idles throughout). The rounds are split over
``BENCH_OBSERVE_PHASES`` phases (default 12, of 20 rounds), each with fresh
environments, the on side's built second then first in turn: an A/A run showed the
second-built side ~3 % slower, and one pair of environments differs from the next by up to
±8 % (A/A phases 0.94 – 1.08 on the 2-vCPU VM), so a few phases cannot resolve 5 %.

Per side: wall ms per step (``start`` -> ``wait`` over 20, as ``linear``), in-worker ms per
step (event timestamps, as ``linear``) and worker CPU ms per step (user + system time of
the worker's main process and pool children over all the rounds, psutil; ticks of 10 ms,
hence the total). Each phase's ratio is B's median wall ms per step over A's; ``ratio``
is the geometric mean of the phases' (each phase a block: pooling rounds of environments
that run at different speeds mixes those speeds into the medians; ``ratio_pooled`` is
that, ``ratio_paired`` the median of the rounds' B/A); the target (issue 16) is
**<= 1.05**.

    python -m bench.observability       # or: bench/run_all.py observability
    BENCH_OBSERVE_REPEATS=480 python -m bench.observability    # more rounds (default 240)
    BENCH_OBSERVE_ON=tracing python -m bench.observability     # B with one of them only
                                                               # (tracing or metrics)
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from bench._harness import BenchEnv, standalone, summary, target
from bench.linear import STEPS, _in_worker_per_step

WARMUP = 5
REPEATS = int(os.environ.get("BENCH_OBSERVE_REPEATS", "240"))
#: Phases, each with environments of its own, the on side built second then first in
#: turn (per-environment differences of a few % average out over them).
PHASES = int(os.environ.get("BENCH_OBSERVE_PHASES", "12"))
TARGET = 1.05
GRAPH = "bench_linear20"


class SideEnv(BenchEnv):
    """A bench environment beside the first (its own Redis database, PostgreSQL database
    and worker), serving the linear graph; ``observe``: ``BENCH_OBSERVE`` for its worker
    and its client (``"0"``: off)."""

    def __init__(self, observe: str) -> None:
        super().__init__()
        # one hash seed for both sides' workers: a process's seed alone moves its speed by
        # a few % (dict and set layouts), which is not what is measured here
        self.worker_env = {"BENCH_OBSERVE": observe, "PYTHONHASHSEED": "0"}

    def __enter__(self) -> SideEnv:
        kept = {k: os.environ.get(k) for k in ("BENCH_REDIS_URL", "BENCH_STORE_URL")}
        os.environ.pop("BENCH_REDIS_URL", None)  # claim a database of its own
        try:
            super().__enter__()  # sets both for its worker
        finally:
            for key, value in kept.items():  # the first environment's, for the driver
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        return self

    def _load_app(self) -> Any:
        from bench import app
        from hypha_celery import Hypha

        which = self.worker_env.get("BENCH_OBSERVE", "")
        hypha = Hypha(app.bench_settings(self.redis_url, self.store_url),
                      middleware=app.observers(which) if which not in ("", "0") else ())
        hypha.register(app.linear_graph(GRAPH, STEPS))

        def add(x: int, y: int = 1) -> Any:  # the worker's bench.add (for its ready check)
            return hypha.celery.send_task("bench.add", (x, y), queue=app.RAW_QUEUE)

        hypha.store.migrate()
        return SimpleNamespace(hypha=hypha, celery=hypha.celery,
                               add=SimpleNamespace(delay=add))


def _cpu_s(pid: int) -> float:
    """User + system seconds of a worker's main process and its pool children."""
    import psutil

    main = psutil.Process(pid)
    total = 0.0
    for proc in (main, *main.children(recursive=True)):
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


@dataclass
class Samples:
    """A side's samples: wall s per run, worker CPU s per run, in-worker s per step."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    inner: list[float] = field(default_factory=list)

    def extend(self, other: Samples) -> None:
        self.wall += other.wall
        self.cpu += other.cpu
        self.inner += other.inner

    def report(self) -> dict[str, Any]:
        return {"wall_ms_per_step": summary(self.wall, 1000 / STEPS),
                "in_worker_ms_per_step": summary(self.inner, 1000),
                "worker_cpu_ms_per_step": round(sum(self.cpu) * 1000 / (len(self.cpu) * STEPS),
                                                3)}


class Side:
    """One side of the A/B in one phase: its client, its worker, its samples."""

    def __init__(self, env: BenchEnv) -> None:
        assert env.app is not None and env.worker is not None
        self.hypha, self.pid = env.app.hypha, env.worker.pid
        self.samples = Samples()
        self.run_ids: list[str] = []

    def sample(self) -> None:
        cpu0 = _cpu_s(self.pid)
        t0 = time.perf_counter()
        run = self.hypha.start(GRAPH)
        result = run.wait(timeout=60)
        dt = time.perf_counter() - t0
        assert result == {"steps": STEPS}, result
        self.samples.wall.append(dt)
        self.samples.cpu.append(_cpu_s(self.pid) - cpu0)
        self.run_ids.append(run.id)

    def clear(self) -> None:
        self.samples = Samples()
        self.run_ids.clear()

    def finished(self) -> Samples:
        """Its samples, with the in-worker ones (read while its store is up)."""
        self.samples.inner = [_in_worker_per_step(self.hypha, rid) for rid in self.run_ids]
        return self.samples


def _phase(which: str, on_first: bool, repeats: int) -> tuple[Samples, Samples]:
    """One phase: the off and the on side's samples, the on side's environment built
    first or second (the second-built side measured ~3 % slower in A/A runs: the phases
    swap it)."""
    order = (which, "0") if on_first else ("0", which)
    with SideEnv(order[0]) as first, SideEnv(order[1]) as second:
        env_on, env_off = (first, second) if on_first else (second, first)
        a, b = Side(env_off), Side(env_on)

        def rounds(n: int) -> None:
            for i in range(n):
                for side in ((a, b) if i % 2 == 0 else (b, a)):
                    side.sample()

        rounds(WARMUP)
        a.clear()
        b.clear()
        rounds(repeats)
        return a.finished(), b.finished()


def bench(env: BenchEnv) -> dict[str, Any]:
    which = os.environ.get("BENCH_OBSERVE_ON", "1")
    each = max(1, REPEATS // PHASES)
    off, on = Samples(), Samples()
    phases: list[float] = []
    for i in range(PHASES):
        phase_off, phase_on = _phase(which, i % 2 == 1, each)
        phases.append(statistics.median(phase_on.wall) / statistics.median(phase_off.wall))
        off.extend(phase_off)
        on.extend(phase_on)
    a, b = off.report(), on.report()
    paired = statistics.median(y / x for x, y in zip(off.wall, on.wall, strict=True))

    def ratio(key: str) -> float:
        return round(b[key]["median"] / a[key]["median"], 3)

    wall = round(statistics.geometric_mean(phases), 3)
    return {
        "graph": GRAPH, "steps": STEPS, "on_is": which, "repeats": PHASES * each,
        "phases": PHASES, "warmup": WARMUP,
        "off": a, "on": b,
        "ratio": wall, "ratio_pooled": ratio("wall_ms_per_step"),
        "ratio_paired": round(paired, 3),
        "ratio_phases": [round(x, 3) for x in phases],
        "ratio_in_worker": ratio("in_worker_ms_per_step"),
        "ratio_worker_cpu": round(b["worker_cpu_ms_per_step"] / a["worker_cpu_ms_per_step"], 3),
        "notes": "off and on: two workers and clients built alike, on with BENCH_OBSERVE=1 "
                 "(TracingMiddleware on an SDK TracerProvider + BatchSpanProcessor to an "
                 "exporter that drops the spans, PrometheusMiddleware). Phases of "
                 "repeats/phases rounds, the on side's environment built second then "
                 "first in turn; "
                 "rounds interleaved (off on, on off, ...). ratio_phases: each phase's median "
                 "on wall ms/step over its median off; ratio = their geometric mean; "
                 "ratio_pooled = the same over all rounds pooled; "
                 "ratio_paired = median of the rounds' on/off.",
        "targets": [target("observability_ratio", wall, "<=", TARGET)],
    }


if __name__ == "__main__":
    standalone("observability", bench)
