"""Live token latency (:mod:`hypha_celery.live`): from ``publish`` in the producer to the
item coming out of a watcher's subscription (what ``RunHandle.stream()`` iterates), p50.

* **memory**: :class:`MemoryLiveBus` (the embedded default), watcher in another thread.
* **redis**: :class:`RedisLiveBus` (outbox thread -> ``PUBLISH`` -> the shared reader
  thread -> the watcher's queue), producer and watcher in this process, Redis on loopback.
* **redis_cross_process**: the producer is a forked child with its own bus (a worker
  publishing, a client watching); ``perf_counter`` is the system-wide monotonic clock.
* **publish_cost**: what ``publish`` costs the producer (the model stream's thread), timed
  per call between the spaced items (this includes the cache misses of a thread that just
  woke from ``sleep``: a bare ``json.dumps`` measures ~15 µs that way on a busy 2-core VM)
  and in a tight loop (``publish_cost_tight_us``: the CPU it takes).
* **raw_publish_rtt**: one synchronous redis-py ``PUBLISH`` round trip, for scale (what a
  producer would pay per token if it published inline).

Items are sent one at a time, ``GAP_S`` apart (a model streams tokens, not bursts), each
carrying its send time (``perf_counter``, one process). Pub/sub touches no keys: no
database is claimed; channels get a random prefix.

    python -m bench.live_latency            # BENCH_REDIS_URL, default redis://127.0.0.1:6379/0

``measure(bus, n)`` is the function other benches (``bench/models.py``) can call.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import run_bench, target
from hypha_celery.live import LiveBus, MemoryLiveBus, RedisLiveBus, end_item

N = int(os.environ.get("BENCH_LIVE_ITEMS", "1000"))
GAP_S = 0.001
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "").strip() or "redis://127.0.0.1:6379/0"
TARGETS = {"redis_publish_to_watcher_p50_ms": ("<=", 5.0)}


def _stats_ms(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {"n": len(samples), "p50_ms": round(statistics.median(samples) * 1000, 3),
            "p95_ms": round(samples[int(len(samples) * 0.95)] * 1000, 3),
            "max_ms": round(samples[-1] * 1000, 3)}


def measure(bus: LiveBus, n: int = N, gap_s: float = GAP_S) -> dict[str, Any]:
    """Publish ``n`` text items ``gap_s`` apart on a fresh topic of ``bus`` while a
    watcher thread reads them: latency publish -> watcher (p50 / p95 / max ms), the
    producer's cost per ``publish`` (µs) and what the watcher lost."""
    topic = f"run:bench-{uuid.uuid4().hex}"
    sub = bus.subscribe(topic, timeout=30)
    latencies: list[float] = []
    lost = [0]

    def watch() -> None:
        for item in sub:
            now = time.perf_counter()
            if item["kind"] == "text":
                latencies.append(now - item["t"])
            elif item["kind"] == "gap":
                lost[0] += item["lost"] or 0

    watcher = threading.Thread(target=watch)
    watcher.start()
    costs: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        bus.publish(topic, {"kind": "text", "text": f" tok{i}", "t": t0})
        costs.append(time.perf_counter() - t0)
        time.sleep(gap_s)
    bus.publish(topic, end_item())
    watcher.join(30)
    costs.sort()
    return {**_stats_ms(latencies), "lost": lost[0],
            "publish_cost_p50_us": round(statistics.median(costs) * 1e6, 2),
            "publish_cost_p95_us": round(costs[int(len(costs) * 0.95)] * 1e6, 2)}


def measure_cross_process(url: str, n: int = N, gap_s: float = GAP_S) -> dict[str, Any]:
    """:func:`measure`'s latency with the producer in a forked child process."""
    import multiprocessing

    prefix = f"hypha-bench:{uuid.uuid4().hex}:"
    watcher_bus = RedisLiveBus(url, prefix=prefix)
    topic = "run:cross"
    sub = watcher_bus.subscribe(topic, timeout=30)

    def produce() -> None:
        bus = RedisLiveBus(url, prefix=prefix)
        for i in range(n):
            bus.publish(topic, {"kind": "text", "text": f" tok{i}", "t": time.perf_counter()})
            time.sleep(gap_s)
        bus.publish(topic, end_item())
        bus.close()

    child = multiprocessing.get_context("fork").Process(target=produce)
    child.start()
    latencies = [time.perf_counter() - item["t"] for item in sub if item["kind"] == "text"]
    child.join(30)
    watcher_bus.close()
    return _stats_ms(latencies)


def tight_cost_us(bus: LiveBus, n: int = N) -> float:
    """Mean µs per ``publish`` of ``n`` items back to back (the outbox thread sends them
    in pipelined batches meanwhile)."""
    topic = f"run:bench-{uuid.uuid4().hex}"
    sub = bus.subscribe(topic, timeout=30)
    t0 = time.perf_counter()
    for i in range(n):
        bus.publish(topic, {"kind": "text", "text": f" tok{i}"})
    took = time.perf_counter() - t0
    bus.flush(5)
    sub.close()
    return round(took / n * 1e6, 2)


def raw_publish_rtt(url: str, n: int = N) -> dict[str, float]:
    import redis

    client = redis.Redis.from_url(url)
    channel = f"hypha-bench:{uuid.uuid4().hex}"
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.publish(channel, b'{"kind":"text","text":" tok"}')
        samples.append(time.perf_counter() - t0)
    client.close()
    return _stats_ms(samples)


def bench() -> dict[str, Any]:
    out: dict[str, Any] = {"items": N, "gap_s": GAP_S}
    memory = MemoryLiveBus()
    measure(memory, 100)  # warm up
    out["memory"] = measure(memory)
    out["memory"]["publish_cost_tight_us"] = tight_cost_us(memory)
    redis_bus = RedisLiveBus(REDIS_URL, prefix=f"hypha-bench:{uuid.uuid4().hex}:")
    try:
        measure(redis_bus, 100)
        out["redis"] = measure(redis_bus)
        out["redis"]["publish_cost_tight_us"] = tight_cost_us(redis_bus)
        out["redis_cross_process"] = measure_cross_process(REDIS_URL)
    finally:
        redis_bus.close()
    out["raw_publish_rtt"] = raw_publish_rtt(REDIS_URL)
    out["targets"] = [target("redis_publish_to_watcher_p50_ms", out["redis"]["p50_ms"],
                             *TARGETS["redis_publish_to_watcher_p50_ms"])]
    return out


def main() -> int:
    return run_bench("live_latency", bench)


if __name__ == "__main__":
    sys.exit(main())
