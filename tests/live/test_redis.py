"""What only the Redis bus has: Redis down, the outbox bound, a forked child publishing,
the default channel prefix."""

from __future__ import annotations

import logging
import multiprocessing
import time
import uuid

import pytest

from hypha_celery.live import LiveBounds, RedisLiveBus, end_item

DOWN = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def test_with_redis_down_publish_neither_raises_nor_waits_and_subscribe_sees_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "hypha_celery.live")
    bus = RedisLiveBus(DOWN, connect_timeout=0.5)
    try:
        started = time.monotonic()
        for i in range(1_000):
            bus.publish("run:r", {"kind": "text", "text": f"secret token {i}"})
        assert time.monotonic() - started < 0.5  # the producer never waits on Redis
        assert bus.flush(5)
        sub = bus.subscribe("run:r", timeout=0.05)
        assert list(sub) == []
        bus.publish("run:r", end_item())
    finally:
        bus.close()
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("live publish failed, ") and m.endswith(": ConnectionError")
               for m in messages)
    assert "live subscribe failed: ConnectionError" in messages
    assert not any("secret" in m or "127.0.0.1" in m for m in messages)


def test_the_outbox_is_bounded_and_tells_the_loss_before_the_topics_next_item(
        redis_url: str) -> None:
    bus = RedisLiveBus(redis_url, prefix=f"hypha-test:{uuid.uuid4().hex}:",
                       bounds=LiveBounds(max_item_bytes=256, outbox_items=5))
    try:
        sub = bus.subscribe("run:r", timeout=5)
        bus.publish("run:r", {"kind": "text", "text": "y" * 4_000})  # ~20 parts in one go
        assert bus.flush(5)
        bus.publish("run:r", {"kind": "text", "text": "next"})
        bus.publish("run:r", end_item())
        got = list(sub)
    finally:
        bus.close()
    assert [i["kind"] for i in got] == ["text"] * 5 + ["gap", "text", "end"]
    lost = got[5]["lost"]
    assert isinstance(lost, int) and lost > 10 and got[6]["text"] == "next"


def _publish_in_child(bus: RedisLiveBus) -> None:
    bus.publish("run:r", {"kind": "text", "text": "from the child"})
    assert bus.flush(5)


def test_a_forked_child_publishes_through_its_own_thread(redis_url: str) -> None:
    bus = RedisLiveBus(redis_url, prefix=f"hypha-test:{uuid.uuid4().hex}:")
    try:
        sub = bus.subscribe("run:r", timeout=5)
        bus.publish("run:r", {"kind": "text", "text": "from the parent"})  # thread started
        assert bus.flush(5)
        child = multiprocessing.get_context("fork").Process(target=_publish_in_child,
                                                            args=(bus,))
        child.start()
        child.join(10)
        assert child.exitcode == 0
        bus.publish("run:r", end_item())
        assert [i.get("text") for i in sub] == ["from the parent", "from the child", None]
    finally:
        bus.close()


def test_the_default_prefix_carries_the_database_number() -> None:
    assert RedisLiveBus("redis://127.0.0.1:6379/7").channel("run:x") == b"hypha:live:7:run:x"
    assert RedisLiveBus("redis://127.0.0.1:6379").prefix == "hypha:live:0:"


def test_a_dropped_connection_is_a_gap_then_items_flow_again(redis_url: str) -> None:
    import redis

    bus = RedisLiveBus(redis_url, prefix=f"hypha-test:{uuid.uuid4().hex}:")
    admin = redis.Redis.from_url(redis_url)
    try:
        sub = bus.subscribe("run:r", timeout=5)
        port = bus._hub._pubsub.connection._sock.getsockname()[1]
        [mine] = [c for c in admin.client_list() if c["addr"].endswith(f":{port}")]
        admin.client_kill_filter(_id=mine["id"])
        assert sub.get(5) == {"kind": "gap", "lost": None}
        deadline = time.monotonic() + 10
        got = None
        while got is None and time.monotonic() < deadline:  # re-subscribed by redis-py
            bus.publish("run:r", {"kind": "text", "text": "back"})
            got = sub.get(0.1)
        assert got == {"kind": "text", "text": "back"}
    finally:
        admin.close()
        bus.close()


def test_a_dense_burst_arrives_whole_and_in_order(redis_url: str) -> None:
    bus = RedisLiveBus(redis_url, prefix=f"t-{uuid.uuid4().hex}:")
    try:
        with bus.subscribe("run:burst", timeout=10) as sub:
            for i in range(500):
                bus.publish("run:burst", {"kind": "text", "text": f"{i}\n"})
                bus.publish("run:other", {"kind": "text", "text": "x"})
            bus.publish("run:burst", end_item(status="completed"))
            got = list(sub)
    finally:
        bus.close()
    assert [g["text"] for g in got[:-1]] == [f"{i}\n" for i in range(500)]
    assert got[-1]["kind"] == "end"


def test_frames_join_runs_of_one_channel_within_the_frame_bound() -> None:
    from hypha_celery.live import _redis as live_redis

    big = b"x" * (live_redis.FRAME_BYTES // 2)
    batch = [(b"a", b"1"), (b"a", b"2"), (b"b", b"3"), (b"a", big), (b"a", big), (b"a", b"4")]
    assert live_redis._frames(batch) == [(b"a", b"1\n2"), (b"b", b"3"), (b"a", big),
                                         (b"a", big + b"\n4")]
