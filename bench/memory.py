"""Memory: worker resident memory growth over 10,000 runs of a 2-node graph.

The worker (main process + its 2 prefork children, measured with psutil) is warmed up
with ``WARMUP`` runs, measured, then runs ``RUNS`` more in batches of ``BATCH`` (start a
batch, wait until the store shows it completed) and is measured after each batch.
Growth = total RSS after the last batch minus total RSS after the warm-up.

    python -m bench.memory            # BENCH_MEMORY_RUNS=2000 for a quick look
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench._harness import BenchEnv, standalone, target
from bench.throughput import start_and_wait

RUNS = int(os.environ.get("BENCH_MEMORY_RUNS", "10000"))
WARMUP = 500
BATCH = 500
TARGET_MB = 50.0
TASKS_PER_RUN = 3  # kickoff coordinator + 2 nodes


def _raw_control(env: BenchEnv, tasks: int) -> dict[str, Any]:
    """The same number of raw no-op tasks on the same worker, for comparison."""
    app = env.app
    assert app is not None
    rds = app.counter_client()
    before = env.worker_memory()
    rds.set(app.COUNTER_KEY, 0)
    sent = 0
    t0 = time.perf_counter()
    while sent < tasks:
        n = min(BATCH * TASKS_PER_RUN, tasks - sent)
        for _ in range(n):
            app.noop.apply_async()
        sent += n
        end = time.monotonic() + 300
        while int(rds.get(app.COUNTER_KEY) or 0) < sent:
            if time.monotonic() > end:
                raise TimeoutError("raw tasks did not complete")
            time.sleep(0.01)
    elapsed = time.perf_counter() - t0
    time.sleep(0.5)
    after = env.worker_memory()
    return {"tasks": tasks, "elapsed_s": round(elapsed, 1),
            "growth_total_rss_mb": round(after["total_rss_mb"] - before["total_rss_mb"], 2),
            "growth_main_rss_mb": round(after["main_rss_mb"] - before["main_rss_mb"], 2),
            "after": after}


def bench(env: BenchEnv) -> dict[str, Any]:
    app = env.app
    assert app is not None
    hypha = app.hypha

    def batch(n: int) -> None:
        start_and_wait(hypha, "bench_pair", n)

    batch(WARMUP)
    time.sleep(0.5)
    before = env.worker_memory()
    series = [{"runs": 0, "total_rss_mb": before["total_rss_mb"]}]
    t0 = time.perf_counter()
    done = 0
    while done < RUNS:
        n = min(BATCH, RUNS - done)
        batch(n)
        done += n
        mem = env.worker_memory()
        series.append({"runs": done, "total_rss_mb": mem["total_rss_mb"],
                       "main_rss_mb": mem["main_rss_mb"],
                       "children_rss_mb": mem["children_rss_mb"]})
    elapsed = time.perf_counter() - t0
    time.sleep(0.5)
    after = env.worker_memory()
    if after["children_pids"] != before["children_pids"]:
        raise RuntimeError("a pool process was replaced during the run; growth is meaningless")
    growth = after["total_rss_mb"] - before["total_rss_mb"]
    control = _raw_control(env, RUNS * TASKS_PER_RUN)
    return {
        "runs": RUNS, "warmup_runs": WARMUP, "graph": "bench_pair (2 nodes)",
        "elapsed_s": round(elapsed, 1), "runs_per_s": round(RUNS / elapsed, 1),
        "after_warmup": before, "after_runs": after,
        "growth_total_rss_mb": round(growth, 2),
        "growth_main_rss_mb": round(after["main_rss_mb"] - before["main_rss_mb"], 2),
        "growth_children_rss_mb": round(sum(after["children_rss_mb"])
                                        - sum(before["children_rss_mb"]), 2),
        "growth_total_uss_mb": round(after["total_uss_mb"] - before["total_uss_mb"], 2),
        "series": series,
        "raw_celery_control": control,
        "targets": [target("memory_growth_mb", growth, "<=", TARGET_MB)],
    }


if __name__ == "__main__":
    standalone("memory", bench)
