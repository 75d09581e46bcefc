"""Malformed messages never crash a worker nor block a queue (issue 3).

A real ``celery worker`` (prefork, one process) of :mod:`tests.integration.malformed_app`
on Redis (SQLite store) and on RabbitMQ (PostgreSQL store) gets a row of messages no
task can run, published with kombu directly, then one good task. The good task runs,
the worker is still alive, every bad message is one dead-letter record with its reason,
the queue is empty (nothing unacked, nothing dead-lettered a second time) and no body
reached the worker log.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection

from hypha_celery.runtime.config import DEAD_LETTER_QUEUE, NODES_QUEUE, celery_config
from hypha_celery.store import EventStore
from tests import services
from tests.integration import malformed_app
from tests.integration.conftest import RedisDbs
from tests.integration.helpers import Backends, Worker, clear_db, rabbit_vhost, wait_until

pytestmark = pytest.mark.services

APP = "tests.integration.malformed_app:celery"
JSON = "application/json"
#: In every bad body: it must never show up in the worker log.
MARK = "BODY-MARK-7f3a"
GOOD = malformed_app.GOOD_TASK


def _body(*args: Any) -> bytes:
    return json.dumps([list(args), {}, {"callbacks": None, "errbacks": None, "chain": None,
                                        "chord": None}]).encode()


def _hdr(task: str | None = GOOD, **extra: Any) -> dict[str, Any]:
    headers: dict[str, Any] = {"lang": "py", "id": f"bad-{uuid.uuid4().hex[:8]}", **extra}
    if task is not None:
        headers["task"] = task
    return headers


@dataclass(frozen=True)
class Bad:
    label: str
    body: bytes
    headers: dict[str, Any]
    content_type: str
    reason: str


def bad_messages() -> list[Bad]:
    envelope = {"run_id": "run-unknown", "execution_id": "run-unknown.1.n", "mark": MARK}
    no_id = _hdr()
    del no_id["id"]
    return [
        Bad("text/plain, no headers", f"\x00garbage {MARK} \xff".encode("latin-1"), {},
            "text/plain", "malformed"),
        Bad("pickle", b"\x80\x04\x95" + MARK.encode(), _hdr(),
            "application/x-python-serialize", "malformed"),
        Bad("broken JSON", b'[["' + MARK.encode() + b'"], {}, {', _hdr(), JSON, "malformed"),
        Bad("JSON, no task header", json.dumps({"hello": MARK}).encode(), {}, JSON,
            "malformed"),
        Bad("unknown task", _body(envelope), _hdr("nobody.registered"), JSON, "unknown_task"),
        Bad("no id header", _body(MARK), no_id, JSON, "invalid_task"),
        Bad("body not [args, kwargs, embed]", json.dumps(MARK).encode(), _hdr(), JSON,
            "invalid_task"),
        Bad("timelimit not [hard, soft]", _body(MARK), _hdr(timelimit="abc"), JSON,
            "invalid_task"),
        Bad("eta not a date", _body(MARK), _hdr(eta="garbage"), JSON, "invalid_task"),
        Bad("body past the bound", _body(MARK * (malformed_app.MAX_MESSAGE_BYTES // 8)),
            _hdr(), JSON, "message_too_large"),
        # anything Celery's handler raises (stock Celery: "Unrecoverable error", exit)
        Bad("the strategy raises", _body(MARK), _hdr(malformed_app.FRAGILE_TASK), JSON,
            "invalid_task"),
    ]


@dataclass
class Setup:
    backends: Backends
    control: Celery
    store: EventStore
    side: redis.Redis


@pytest.fixture(params=["redis", "rabbitmq"])
def setup(request: pytest.FixtureRequest, itest_redis: RedisDbs, tmp_path: Path
          ) -> Iterator[Setup]:
    side_url = itest_redis.dedicated
    clear_db(side_url)
    if request.param == "redis":
        yield from _setup(Backends("redis", side_url, side_url,
                                   f"sqlite:///{tmp_path / 'hypha.db'}"))
        return
    amqp_url = str(request.getfixturevalue("amqp_url"))
    with services.postgres_server() as pg, rabbit_vhost(amqp_url) as broker:
        if pg is None:
            services.unavailable("PostgreSQL (127.0.0.1:5432, database 'test')")
        assert pg is not None
        yield from _setup(Backends("rabbitmq", broker, side_url, pg))


def _setup(backends: Backends) -> Iterator[Setup]:
    store = EventStore(backends.store_url)
    store.migrate()
    control = Celery("test-control")
    control.config_from_object(celery_config(backends.settings()))
    side = redis.Redis.from_url(backends.result_backend)
    try:
        yield Setup(backends, control, store, side)
    finally:
        control.close()
        store.dispose()
        side.close()


def _publish(control: Celery, bad: Bad) -> None:
    with control.connection_for_write() as conn:
        conn.Producer().publish(bad.body, exchange=NODES_QUEUE, routing_key=NODES_QUEUE,
                                headers=bad.headers, content_type=bad.content_type,
                                content_encoding="utf-8", retry=True)


def _ready(s: Setup, queue: str) -> int:
    """Messages in ``queue`` (Redis: also those a consumer holds unacked)."""
    if s.backends.name == "redis":
        return int(s.side.llen(queue)) + int(s.side.hlen("unacked"))
    with Connection(s.backends.broker_url) as conn:
        _name, count, _consumers = conn.default_channel.queue_declare(queue, passive=True)
    return int(count)


def test_malformed_messages_are_dead_letters_and_the_queue_goes_on(
        setup: Setup, tmp_path: Path) -> None:
    s = setup
    worker = Worker(s.backends, tmp_path / "worker.log", queues=[NODES_QUEUE], concurrency=1,
                    app=APP)
    worker.start(s.control)
    try:
        bad = bad_messages()
        for message in bad:
            _publish(s.control, message)
        s.control.send_task(GOOD, args=["after the bad ones"], queue=NODES_QUEUE,
                            ignore_result=True)

        wait_until(lambda: s.side.lrange(malformed_app.GOOD_KEY, 0, -1), what="the good task",
                   log=worker.tail)

        def all_recorded() -> list[dict[str, Any]] | None:
            found = s.store.dead_letters(status=None)
            return found if len(found) >= len(bad) else None

        records = wait_until(all_recorded, what="a record per bad message", log=worker.tail)
        assert worker.proc is not None and worker.proc.poll() is None, worker.tail()
        assert s.control.control.ping(destination=[worker.name], timeout=2.0)
        worker.stop()  # a message it still held unacked goes back to its queue
    finally:
        worker.stop()
    # nothing left behind (nor, on RabbitMQ, routed to the dead-letter exchange: acked)
    assert _ready(s, NODES_QUEUE) == 0
    if s.backends.name == "rabbitmq":
        assert _ready(s, DEAD_LETTER_QUEUE) == 0  # (declared with hypha.nodes)

    assert Counter(r["reason"] for r in records) == Counter(b.reason for b in bad), records
    assert all(r["error_class"] == "validation" and r["attempts"] == 1 for r in records)
    assert all(r["queue"] == NODES_QUEUE for r in records), [r["queue"] for r in records]
    by_id = {r["execution_id"]: r for r in records if r["execution_id"]}
    for b in bad:
        if "id" in b.headers:
            assert by_id[b.headers["id"]]["reason"] == b.reason, b.label

    unknown = next(r for r in records if r["reason"] == "unknown_task")
    assert unknown["task"] == "nobody.registered"
    assert unknown["run_id"] == "run-unknown"
    assert unknown["args"] == [{"run_id": "run-unknown", "execution_id": "run-unknown.1.n",
                                "mark": MARK}]
    raw = next(r for r in records if r["task"] == "?" and "garbage" in str(r["args"]))
    assert raw["execution_id"] is None and raw["reason"] == "malformed"
    assert set(raw["args"]) == {"raw"} and MARK in raw["args"]["raw"]
    assert next(r for r in records if "timelimit" in r["error"]["message"])["task"] == GOOD
    fragile = next(r for r in records if r["task"] == malformed_app.FRAGILE_TASK)
    assert fragile["error"] == {"type": "RuntimeError", "message": "the strategy failed"}
    assert fragile["args"] == [MARK]

    log = worker.tail(200_000)
    assert log.count("hypha: dead-lettered a message") == len(bad), log
    assert MARK not in log, log
    assert "Unrecoverable error" not in log, log
