"""Shared rate limits: GCRA per key in Redis (one EVALSHA per decision) and in memory;
concurrency slots per key, leased in Redis (across processes) and held in memory."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from hypha_celery.backends import BackendError
from hypha_celery.backends.llm.ratelimit import (
    FREE,
    NO_LIMITS,
    Limit,
    Limiter,
    MemoryLimiter,
    RedisLimiter,
    limit_key,
    parse_limits,
)
from hypha_celery.graph import classify

ROOT = Path(__file__).resolve().parents[3]


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
    # 2 s apart once the bucket is empty: emptying it (30 calls) never takes that long,
    # even on a busy machine, so the next call must wait
    limiter = make({"openai": Limit(rpm=30)})
    for _ in range(30):
        limiter.acquire("openai:k", 0, 0)
    began = time.monotonic()
    waited = limiter.acquire("openai:k", 0, max_wait=3.0)
    # what it waited is measured: a sleep may overshoot the refill by a scheduler tick
    assert 0.1 < waited <= 2.05 and time.monotonic() - began >= 0.1
    with pytest.raises(BackendError) as caught:
        limiter.acquire("openai:k", 0, max_wait=0.05)
    err = caught.value
    assert (err.kind, err.retryable, err.provider) == ("rate_limited", True, "openai")
    assert isinstance(err.retry_after, float) and 0 < err.retry_after <= 2.0
    assert classify(err) == "rate_limit"  # a node's RetryPolicy retries it
    stats = limiter.stats()
    assert (stats["granted"], stats["waited"], stats["refused"]) == (31, 1, 1)
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


# -- concurrency: slots per key, across workers, leased ---------------------------------

def test_concurrency_bounds_the_slots_held_at_once(make: type) -> None:
    limiter = make({"openai": Limit(concurrency=2)})
    one, two = limiter.hold("openai:k", 0), limiter.hold("openai:k", 0)
    assert limiter.in_flight("openai:k") == 2
    with pytest.raises(BackendError) as caught:
        limiter.hold("openai:k", max_wait=0.1)
    err = caught.value
    assert (err.kind, err.retryable) == ("rate_limited", True)
    assert "concurrency limit of openai:k" in err.message and classify(err) == "rate_limit"
    assert limiter.hold("openai:other", 0).release() is None  # another key: its own slots
    one.release()
    one.release()  # twice is harmless
    with limiter.hold("openai:k", 0) as three:
        assert three.waited == 0.0 and limiter.in_flight("openai:k") == 2
    two.release()
    assert limiter.in_flight("openai:k") == 0
    stats = limiter.stats()
    assert (stats["slots_granted"], stats["slots_refused"], stats["slots_waited"]) == (4, 1, 0)


def test_a_waiter_gets_the_slot_a_release_frees(make: type) -> None:
    limiter = make({"openai": Limit(concurrency=1)})
    held = limiter.hold("openai:k", 0)
    threading.Timer(0.3, held.release).start()
    began = time.monotonic()
    with limiter.hold("openai:k", max_wait=5) as slot:
        assert 0.25 < time.monotonic() - began < 1.0 and slot.waited > 0.25
    stats = limiter.stats()
    assert stats["slots_waited"] == 1 and stats["slot_wait_seconds"] > 0.25


def test_no_concurrency_limit_holds_nothing(make: type) -> None:
    limiter = make({"openai": Limit(rpm=100)})
    assert limiter.hold("openai:k", 0) is FREE and NO_LIMITS.hold("openai:k", 0) is FREE
    assert limiter.stats()["slots_granted"] == 0
    assert Limit.of({"concurrency": 3}) == Limit(concurrency=3) and not Limit(concurrency=3).empty
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError):
            Limit(concurrency=bad)  # type: ignore[arg-type]


def _worker(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.backends.llm.slots_worker",
                             *map(str, args)], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)


def test_two_processes_share_the_slots_of_a_key(redis_url: str) -> None:
    """Two worker processes, four threads each, 50 ms calls under a limit of 3: never
    more than 3 in flight, and all 40 calls go through."""
    prefix = f"test:slots:{uuid.uuid4().hex[:8]}:"
    client = redis.Redis.from_url(redis_url)
    workers = [_worker("calls", redis_url, prefix, 4, 5, 3) for _ in range(2)]
    try:
        outs = [w.communicate(timeout=60)[0] for w in workers]
        assert [w.returncode for w in workers] == [0, 0] and outs == ["done\n"] * 2
        assert 2 <= int(client.get(f"{prefix}max") or 0) <= 3
        assert int(client.get(f"{prefix}live") or 0) == 0
        assert client.zcard(f"{prefix}openai:k1:slots") == 0  # every slot released
    finally:
        for w in workers:
            w.kill()
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
        client.close()


def test_a_killed_holder_leaks_its_slot_for_one_lease_at_most(redis_url: str) -> None:
    prefix = f"test:slots:{uuid.uuid4().hex[:8]}:"
    holder = _worker("hold", redis_url, prefix, 1.5)
    limiter = RedisLimiter(redis_url, {"openai": Limit(concurrency=1)}, prefix=prefix)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert limiter.in_flight("openai:k1") == 1
        with pytest.raises(BackendError):  # the holder lives: its lease is renewed
            limiter.hold("openai:k1", max_wait=2.0)
        holder.kill()  # SIGKILL: no release
        holder.wait(10)
        began = time.monotonic()
        with limiter.hold("openai:k1", max_wait=5.0):
            assert time.monotonic() - began < 1.5 + 0.5
        assert limiter.stats()["slots_reclaimed"] == 1
    finally:
        holder.kill()
        holder.communicate()  # closes its pipe
        limiter.client.delete(f"{prefix}openai:k1:slots")
        limiter.close()


def test_a_slot_held_past_its_lease_is_renewed(redis_url: str) -> None:
    prefix = f"test:slots:{uuid.uuid4().hex[:8]}:"
    mine = RedisLimiter(redis_url, {"openai": Limit(concurrency=1)}, prefix=prefix,
                        slot_lease=0.3)
    other = RedisLimiter(redis_url, {"openai": Limit(concurrency=1)}, prefix=prefix)
    try:
        with mine.hold("openai:k", 0):
            time.sleep(1.0)  # three leases long
            with pytest.raises(BackendError):
                other.hold("openai:k", 0)
            assert other.in_flight("openai:k") == 1
        assert other.in_flight("openai:k") == 0
        with other.hold("openai:k", 0):
            pass
        assert other.stats()["slots_reclaimed"] == 0
    finally:
        mine.close()
        other.close()
