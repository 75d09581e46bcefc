"""Shared rate limits: GCRA per key in Redis (one EVALSHA per decision) and in memory."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from hypha_celery.backends import BackendError
from hypha_celery.backends.llm.ratelimit import (
    NO_LIMITS,
    Limit,
    Limiter,
    MemoryLimiter,
    RedisLimiter,
    limit_key,
    parse_limits,
)
from hypha_celery.graph import classify


@pytest.fixture(params=["memory", "redis"])
def make(request: pytest.FixtureRequest) -> Iterator[type]:
    """A limiter factory: ``make(limits)``, in memory or on the session's Redis database
    (a fresh key prefix per test)."""
    if request.param == "memory":
        yield MemoryLimiter
        return
    url = request.getfixturevalue("redis_url")
    client = redis.Redis.from_url(url)
    prefix = f"test:rl:{uuid.uuid4().hex[:8]}:"
    made: list[Limiter] = []

    def factory(limits: dict[str, Limit] | None = None) -> Limiter:
        limiter = RedisLimiter(client, limits, prefix=prefix)
        made.append(limiter)
        return limiter
    yield factory  # type: ignore[misc]
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    client.close()


def test_the_key_id_is_a_hash_never_the_key() -> None:
    key = "sk-live-secret-0123456789"
    assert limit_key("openai", key) == limit_key("openai", key)
    assert key not in limit_key("openai", key)
    assert limit_key("openai", key).startswith("openai:") and len(limit_key("openai", key)) == 19


def test_a_minute_of_requests_goes_at_once_then_one_per_interval(make: type) -> None:
    limiter = make({"openai": Limit(rpm=60)})  # one a second, 60 in the bucket
    for _ in range(60):
        assert limiter.decide("openai:k1", 0) == 0
    wait = limiter.decide("openai:k1", 0)
    assert 0.5 < wait <= 1.0
    # another key of the same vendor has its own bucket
    assert limiter.decide("openai:k2", 0) == 0


def test_tokens_per_minute_and_requests_are_decided_together(make: type) -> None:
    limiter = make({"anthropic": Limit(rpm=1000, tpm=6000)})  # 100 tokens/s
    assert limiter.decide("anthropic:k", 5000) == 0
    wait = limiter.decide("anthropic:k", 2000)
    assert 9.0 < wait <= 10.0  # 1000 tokens over the bucket: 10 s at 100/s
    assert limiter.decide("anthropic:k", 500) == 0  # a refusal took nothing
    # a call bigger than the bucket goes when the bucket is full
    fresh = make({"anthropic": Limit(tpm=6000)})
    assert fresh.decide("anthropic:big", 50_000) == 0


def test_acquire_waits_what_the_decision_says_then_fails_past_its_bound(make: type) -> None:
    limiter = make({"openai": Limit(rpm=300)})  # 0.2 s apart once the bucket is empty
    for _ in range(300):
        limiter.acquire("openai:k", 0, 0)
    began = time.monotonic()
    waited = limiter.acquire("openai:k", 0, max_wait=1.0)
    assert 0.1 < waited < 0.6 and time.monotonic() - began >= 0.1
    with pytest.raises(BackendError) as caught:
        limiter.acquire("openai:k", 0, max_wait=0.05)
    err = caught.value
    assert (err.kind, err.retryable, err.provider) == ("rate_limited", True, "openai")
    assert isinstance(err.retry_after, float) and 0 < err.retry_after <= 0.2
    assert classify(err) == "rate_limit"  # a node's RetryPolicy retries it
    stats = limiter.stats()
    assert (stats["granted"], stats["waited"], stats["refused"]) == (301, 1, 1)
    assert stats["wait_seconds"] > 0.1


def test_a_pause_stops_every_limiter_sharing_the_store_until_it_ends(make: type) -> None:
    one, other = make(), make()  # no limits configured: the pause still holds
    one.pause("openai:k", 0.3)
    shared = other if isinstance(other, RedisLimiter) else one
    assert 0.2 < shared.decide("openai:k", 0) <= 0.3
    assert shared.decide("openai:other", 0) == 0
    with pytest.raises(BackendError):
        shared.acquire("openai:k", 0, max_wait=0.1)
    assert shared.acquire("openai:k", 0, max_wait=1.0) > 0.1
    assert one.stats()["paused"] == 1


def test_workers_share_one_budget(make: type) -> None:
    limits = {"openai": Limit(rpm=60)}
    workers = [make(limits) for _ in range(4)] if make is not MemoryLimiter \
        else [make(limits)] * 4
    granted: list[int] = []

    def work(limiter: Limiter) -> None:
        granted.append(sum(limiter.decide("openai:shared", 0) == 0 for _ in range(50)))
    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 60


def test_a_key_limit_wins_over_its_vendor_and_none_decides_nothing() -> None:
    limiter = MemoryLimiter({"openai": Limit(rpm=1), "openai:vip": {"rpm": 1000}})
    assert limiter.limit_for("openai:vip") == Limit(rpm=1000)
    assert limiter.limit_for("openai:other") == Limit(rpm=1)
    assert limiter.limit_for("anthropic:x").empty
    assert NO_LIMITS.acquire("openai:x", 10**9, 0) == 0.0
    assert parse_limits('{"openai": {"rpm": 5, "tpm": 10}}') == {"openai": Limit(5, 10)}
    with pytest.raises(ValueError):
        parse_limits({"openai": {"rpm": -1}})
    with pytest.raises(ValueError):
        parse_limits({"openai": {"rps": 1}})


def test_a_redis_decision_is_one_evalsha(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    limiter = RedisLimiter(client, {"openai": Limit(rpm=100)}, prefix="test:rl:sha:")
    try:
        limiter.decide("openai:k", 0)  # loads the script once (NOSCRIPT -> EVAL)
        before = client.info("commandstats")
        for _ in range(10):
            limiter.decide("openai:k", 0)
        after = client.info("commandstats")
        calls = after["cmdstat_evalsha"]["calls"] - before.get("cmdstat_evalsha", {}).get(
            "calls", 0)
        assert calls == 10
        assert "cmdstat_eval" not in after or \
            after["cmdstat_eval"]["calls"] == before.get("cmdstat_eval", {}).get("calls", 0)
        assert 0 < client.pttl("test:rl:sha:openai:k") <= 61_000
    finally:
        client.delete("test:rl:sha:openai:k")
        client.close()
