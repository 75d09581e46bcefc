"""Two celery beats never sweep at once: the sweep lock (hypha_celery.beat.singleton)
in Redis and in one process, and two real ``celery beat`` processes with one worker."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from celery.schedules import schedule

from hypha_celery import Hypha, Settings
from hypha_celery.beat import singleton
from hypha_celery.beat.singleton import KEY, LocalLock, RedisLock
from hypha_celery.runtime.config import celery_config
from tests.beat import singleton_app
from tests.integration.helpers import REPO, Backends, Worker, close_client, purge, wait_until

INTERVAL = 0.5
WINDOW = 5.0


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.delete(KEY)
    c.close()


def _locks(client: redis.Redis, ttl: float = singleton.TTL) -> tuple[RedisLock, RedisLock]:
    return RedisLock(client, ttl=ttl), RedisLock(client, ttl=ttl)


def test_redis_lock_one_holder_skip_wait_and_release(client: redis.Redis) -> None:
    a, b = _locks(client)
    with a.held(wait=0, take_done=False, hold=0) as mine:
        assert mine
        assert client.get(KEY).startswith(b"run:")
        with b.held(wait=0, take_done=False, hold=0) as theirs:
            assert not theirs  # beat's sweep skips
        with b.held(wait=0, take_done=True, hold=0) as theirs:
            assert not theirs  # a running sweep is never taken over
    assert client.get(KEY) is None  # released
    with b.held(wait=0, take_done=False, hold=0) as mine:
        assert mine


def test_redis_lock_gap_after_a_beat_sweep(client: redis.Redis) -> None:
    a, b = _locks(client)
    with a.held(wait=0, take_done=False, hold=0.6) as mine:
        assert mine
    assert client.get(KEY).startswith(b"done:")
    with b.held(wait=0, take_done=False, hold=0) as theirs:
        assert not theirs  # the second beat's message, a moment later
    with b.held(wait=0, take_done=True, hold=0) as by_hand:
        assert by_hand  # hypha sweep ignores the gap
    assert client.get(KEY) is None
    with a.held(wait=0, take_done=False, hold=0.2):
        pass
    time.sleep(0.35)
    with b.held(wait=0, take_done=False, hold=0) as later:
        assert later  # the gap expired


def test_redis_lock_is_renewed_and_a_waiter_gets_it_after(client: redis.Redis) -> None:
    a, b = _locks(client, ttl=0.3)
    got: list[bool] = []
    with a.held(wait=0, take_done=False, hold=0) as mine:
        assert mine
        waiter = threading.Thread(target=lambda: got.append(
            b.held(wait=5, take_done=True, hold=0).__enter__()))
        waiter.start()
        time.sleep(0.9)  # three TTLs: renewed, still ours
        assert client.get(KEY).startswith(b"run:")
        assert not got
    waiter.join(5)
    assert got == [True]  # a sweep by hand waited, then swept


def test_redis_lock_never_released_by_another_token(client: redis.Redis) -> None:
    a, _ = _locks(client)
    client.set(KEY, b"run:someone-else", px=5000)
    with a.held(wait=0, take_done=True, hold=0) as mine:
        assert not mine
    assert client.get(KEY) == b"run:someone-else"


def test_redis_down_sweeps_anyway() -> None:
    lock = RedisLock(redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2))
    with lock.held(wait=0, take_done=False, hold=0) as mine:
        assert mine  # a duplicate sweep is harmless; no sweep is not
    lock.client.close()


def test_local_lock() -> None:
    lock = LocalLock()
    with lock.held(wait=0, take_done=False, hold=0.3) as mine:
        assert mine
        with lock.held(wait=0, take_done=True, hold=0) as theirs:
            assert not theirs
    with lock.held(wait=0, take_done=False, hold=0) as gap:
        assert not gap
    with lock.held(wait=0, take_done=True, hold=0) as by_hand:
        assert by_hand
    started = time.monotonic()
    with lock.held(wait=1, take_done=False, hold=0) as waited:
        assert waited  # the gap of the first sweep ends 0.3 s after it started
    assert time.monotonic() - started < 1


def test_embedded_sweep_uses_the_local_lock(tmp_path: Path) -> None:
    app = Hypha(Settings("memory://", "cache+memory://", f"sqlite:///{tmp_path / 'h.db'}",
                         embedded=True))
    try:
        app.store.migrate()
        with singleton.LOCAL.held(wait=0, take_done=True, hold=0):
            done: list[object] = []
            t = threading.Thread(target=lambda: done.append(app.sweep()))
            t.start()
            time.sleep(0.3)
            assert not done  # a sweep by hand waits for the one in progress
        t.join(10)
        assert done == [[]]
    finally:
        app.close()


def test_two_beats_sweep_at_the_interval_never_at_once(redis_url: str, tmp_path: Path) -> None:
    backends = Backends("redis", redis_url, redis_url, f"sqlite:///{tmp_path / 'h.db'}")
    env = {"HYPHA_SWEEP_INTERVAL": str(INTERVAL)}
    client = Hypha(backends.settings())
    client.store.migrate()
    purge(redis_url, ["hypha.coordinator"])
    side = redis.Redis.from_url(redis_url)
    worker = Worker(backends, tmp_path / "worker.log", queues=["hypha.coordinator"],
                    concurrency=4, app="tests.beat.singleton_app:celery", env=env)
    beats: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / "beat1.log", tmp_path / "beat2.log"]
    try:
        worker.start(client.celery)
        for log in logs:
            with log.open("wb") as out:
                beats.append(subprocess.Popen(
                    [sys.executable, "-m", "celery", "-A", "tests.beat.singleton_app:celery",
                     "beat", "-l", "INFO"], cwd=REPO, env=backends.env(**env), stdout=out,
                    stderr=subprocess.STDOUT))

        def sent() -> bool:
            for beat in beats:
                assert beat.poll() is None, "\n".join(p.read_text() for p in logs)
            return all(p.read_text().count("Sending due task") >= 2 for p in logs)

        wait_until(sent, 60, "both beats to send the supervisor task", worker.tail)
        side.delete(singleton_app.SWEEPS)
        time.sleep(WINDOW)
        sends = [p.read_text().count("Sending due task") for p in logs]
        rows = sorted(tuple(map(float, r.split())) for r in side.lrange(
            singleton_app.SWEEPS, 0, -1))
    finally:
        for beat in beats:
            beat.terminate()
            beat.wait(20)
        worker.stop()
        side.close()
        close_client(client)
    assert all(s >= WINDOW / INTERVAL for s in sends), sends  # both beats kept sending
    for (_, end), (start, _) in zip(rows, rows[1:], strict=False):
        assert start >= end, rows  # never two at once
    expected = WINDOW / INTERVAL  # 10 sweeps; without the lock twice that
    assert expected / 2 <= len(rows) <= expected / singleton.GAP + 2, (len(rows), rows, sends)


@pytest.mark.parametrize("every", ["", "0.5"])
def test_the_schedule_file_is_the_built_in_one(every: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPHA_SWEEP_INTERVAL", every)
    spec = importlib.util.spec_from_file_location("_beat_schedule", REPO / "beat" / "schedule.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    settings = Settings.from_env({"HYPHA_BROKER_URL": "redis://127.0.0.1:1/0",
                                  "HYPHA_SWEEP_INTERVAL": every})
    assert module.beat_schedule == celery_config(settings)["beat_schedule"]


def test_the_interval_comes_from_the_apps_schedule(tmp_path: Path) -> None:
    app = Hypha(Settings("memory://", "cache+memory://", f"sqlite:///{tmp_path / 'h.db'}",
                         embedded=True))
    try:
        rt = app._rt
        assert singleton.interval(rt) == 5.0
        for every, seconds in ((timedelta(seconds=2), 2.0), (schedule(run_every=3), 3.0)):
            app.celery.conf.beat_schedule = {"mine": {"task": "hypha.supervisor",
                                                      "schedule": every}}
            assert singleton.interval(rt) == seconds
        app.celery.conf.beat_schedule = {}
        assert singleton.interval(rt) == 0.0
        assert not singleton.from_beat(rt)  # called by hand
    finally:
        app.close()
