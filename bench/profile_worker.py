"""Profile the worker's pool processes (cProfile) while they run a hypha workload.

    python -m bench.profile_worker [linear|fanout|throughput|raw|noop] [--runs N] [--top N] [--main]

Starts the usual bench environment with ``BENCH_PROFILE`` set, so every prefork child
profiles itself (see ``bench/app.py``); after the workload the worker is stopped, the
per-process profiles are merged and the top functions are printed (cumulative and own
time). A diagnostic tool: the numbers are inflated by the profiler itself.
"""

from __future__ import annotations

import argparse
import pstats
import tempfile
import time
from pathlib import Path

from celery import chain

from bench._harness import BenchEnv
from bench.throughput import start_and_wait


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", nargs="?", default="linear",
                    choices=["linear", "fanout", "throughput", "raw", "noop"])
    ap.add_argument("--runs", type=int, default=30,
                    help="runs (chains for raw; noop publishes 5 x runs tasks)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--out", default="", help="also save the merged stats here")
    ap.add_argument("--main", action="store_true",
                    help="show the worker's main (consumer) process instead of the pool")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with BenchEnv(profile_dir=tmp) as env:
            assert env.app is not None
            hypha = env.app.hypha
            t0 = time.perf_counter()
            if args.workload == "raw":
                for _ in range(args.runs):
                    hops = [env.app.add.s(0)] + [env.app.add.s() for _ in range(19)]
                    chain(*hops).apply_async().get(timeout=60)
            elif args.workload == "noop":
                rds = env.app.counter_client()
                rds.set(env.app.COUNTER_KEY, 0)
                for _ in range(args.runs * 5):
                    env.app.noop.apply_async()
                while int(rds.get(env.app.COUNTER_KEY) or 0) < args.runs * 5:
                    time.sleep(0.01)
            elif args.workload == "throughput":
                start_and_wait(hypha, "bench_linear5", args.runs)
            else:
                graph = "bench_linear20" if args.workload == "linear" else "bench_fanout100"
                for _ in range(args.runs):
                    hypha.start(graph).wait(timeout=60)
            print(f"workload {args.workload} x{args.runs}: {time.perf_counter() - t0:.2f}s")
        pattern = "main-*.prof" if args.main else "worker-*.prof"
        files = sorted(str(p) for p in Path(tmp).glob(pattern))
        if not files:
            raise SystemExit("no profiles were written")
        stats = pstats.Stats(*files)
        if args.out:
            stats.dump_stats(args.out)
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
