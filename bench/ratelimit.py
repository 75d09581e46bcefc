"""Rate-limit decisions (:mod:`hypha_celery.backends.llm.ratelimit`): how long one
decision takes, p50 / p95, against real Redis (one ``EVALSHA`` round trip on loopback)
and in memory, for a granted call (limits with room) and for an unlimited key (the pause
check only).

    python -m bench.ratelimit          # BENCH_REDIS_URL, default redis://127.0.0.1:6379/0

No database is claimed: keys get a random prefix and are deleted at the end.
``decision_ms(url)`` is the function other benches (``bench/models.py``) call: the p50 in
milliseconds of a Redis decision.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import run_bench, target
from hypha_celery.backends.llm.ratelimit import Limit, Limiter, MemoryLimiter, RedisLimiter

N = int(os.environ.get("BENCH_RATELIMIT_N", "2000"))
LIMITS = {"openai": Limit(rpm=10**9, tpm=10**12)}  # always room: every decision grants


def redis_url() -> str:
    return os.environ.get("BENCH_REDIS_URL", "").strip() or "redis://127.0.0.1:6379/0"


def _timed(limiter: Limiter, key: str, n: int) -> list[float]:
    for _ in range(50):  # warm-up: the script is loaded, the connection open
        limiter.decide(key, 100)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        limiter.decide(key, 100)
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def _summary(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {"n": len(samples), "p50_ms": round(statistics.median(samples), 4),
            "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 4),
            "max_ms": round(samples[-1], 4)}


def _redis(url: str, n: int, limits: dict[str, Limit]) -> list[float]:
    import redis

    client = redis.Redis.from_url(url)
    prefix = f"bench:rl:{uuid.uuid4().hex[:8]}:"
    try:
        return _timed(RedisLimiter(client, limits, prefix=prefix), "openai:benchkey", n)
    finally:
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
        client.close()


def decision_ms(url: str | None = None, n: int = N) -> float:
    """p50 milliseconds of one Redis decision (a granted call with rpm and tpm limits)."""
    return float(statistics.median(_redis(url or redis_url(), n, LIMITS)))


def bench() -> dict[str, Any]:
    url = redis_url()
    out: dict[str, Any] = {
        "redis_limited": _summary(_redis(url, N, LIMITS)),
        "redis_unlimited_key": _summary(_redis(url, N, {})),
        "memory_limited": _summary(_timed(MemoryLimiter(LIMITS), "openai:benchkey", N)),
    }
    out["targets"] = [target("ratelimit_decision_redis_p50_ms",
                             out["redis_limited"]["p50_ms"], "<=", 1.0)]
    return out


def main() -> int:
    return run_bench("ratelimit", bench)


if __name__ == "__main__":
    sys.exit(main())
