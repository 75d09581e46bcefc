"""RabbitMQ quorum queues, the dead-letter exchange and its drain (issue 3).

Every test runs on a private vhost (``rabbitmqctl``; the queue names are fixed). The
worker tests run one real ``celery worker`` process of
:mod:`tests.integration.malformed_app` with ``HYPHA_DELIVERY_LIMIT=2``, told to consume
``hypha.nodes`` *and* ``hypha.dead_letter`` (it must refuse the latter).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection

from hypha_celery.runtime import rabbit
from hypha_celery.runtime.config import (
    AGENTS_QUEUE,
    COORDINATOR_QUEUE,
    DEAD_LETTER_QUEUE,
    EFFECTS_QUEUE,
    IO_QUEUE,
    NODES_QUEUE,
    Settings,
    celery_config,
)
from hypha_celery.runtime.rabbit import DeadMessage, drain_dead_letters
from tests import services
from tests.integration import malformed_app
from tests.integration.conftest import RedisDbs
from tests.integration.helpers import Backends, Worker, clear_db, rabbit_vhost, wait_until

pytestmark = pytest.mark.services

APP = "tests.integration.malformed_app:celery"
LIMIT = 2
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
DLX_ARGS = {"x-queue-type": "quorum", "x-dead-letter-exchange": "hypha.dead_letter",
            "x-dead-letter-routing-key": "hypha.dead_letter", "x-delivery-limit": LIMIT}


@dataclass(frozen=True)
class Broker:
    vhost: str
    url: str
    side_url: str

    def settings(self, store_url: str = "sqlite://") -> Settings:
        return Settings(broker_url=self.url, result_backend=self.side_url, store_url=store_url,
                        embedded=False, delivery_limit=LIMIT, broker_delivery_limit=LIMIT)

    def app(self) -> Celery:
        app = Celery(f"test-{uuid.uuid4().hex[:6]}")
        app.config_from_object(celery_config(self.settings()))
        return app

    def ctl(self, *args: str) -> Any:
        """``rabbitmqctl -p VHOST ARGS --formatter json``, parsed."""
        done = subprocess.run(["rabbitmqctl", "-q", "-p", self.vhost, *args, "--formatter",
                               "json"], capture_output=True, text=True, timeout=30, check=True)
        return json.loads(done.stdout or "[]")

    def queues(self) -> dict[str, dict[str, Any]]:
        """name -> {type, arguments} (rabbitmqctl's message counts lag: see :meth:`stats`)."""
        rows = self.ctl("list_queues", "name", "type", "arguments")
        for row in rows:
            row["arguments"] = {k: v for k, _type, v in row["arguments"]}
        return {row["name"]: row for row in rows}

    def stats(self, queue: str) -> tuple[int, int]:
        """(ready messages, consumers) of ``queue``, from the broker now."""
        with Connection(self.url) as conn:
            _name, count, consumers = conn.default_channel.queue_declare(queue, passive=True)
        return int(count), int(consumers)

    def ready(self, queue: str) -> int:
        return self.stats(queue)[0]


@contextmanager
def _private_vhost(amqp_url: str) -> Iterator[str]:
    with rabbit_vhost(amqp_url) as url:
        if url == amqp_url:
            services.unavailable("a private RabbitMQ vhost (rabbitmqctl add_vhost)")
        yield url


#: The result backend of the apps that only publish or drain (never contacted).
UNUSED_BACKEND = "redis://127.0.0.1:1/0"


@pytest.fixture
def broker(amqp_url: str) -> Iterator[Broker]:
    """A vhost of this test alone."""
    with _private_vhost(amqp_url) as url:
        yield Broker(url.rsplit("/", 1)[1], url, UNUSED_BACKEND)


def _publish(url: str, *, exchange: str, routing_key: str, task: str, task_id: str,
             args: list[Any], body: bytes | None = None,
             content_type: str = "application/json") -> None:
    payload = json.dumps([args, {"k": 2}, EMBED]).encode() if body is None else body
    with Connection(url) as conn:
        conn.Producer().publish(payload, exchange=exchange, routing_key=routing_key,
                                headers={"lang": "py", "task": task, "id": task_id},
                                content_type=content_type, content_encoding="utf-8",
                                retry=True)


# -- (a) declarations -------------------------------------------------------------------
def test_the_profile_declares_dead_lettered_quorum_queues(broker: Broker) -> None:
    app = broker.app()
    gpu = rabbit.declare_queue(app, "gpu", LIMIT)
    assert app.amqp.queues["gpu"] is gpu
    assert app.conf.worker_consumer == "hypha_celery.runtime.consumer:HyphaConsumer"
    names = {q.name for q in app.conf.task_queues}
    assert names == {COORDINATOR_QUEUE, NODES_QUEUE, EFFECTS_QUEUE, AGENTS_QUEUE, IO_QUEUE,
                     DEAD_LETTER_QUEUE}
    with app.connection_for_write() as conn:
        for name in (COORDINATOR_QUEUE, NODES_QUEUE, EFFECTS_QUEUE, AGENTS_QUEUE, IO_QUEUE, "gpu"):
            app.amqp.queues[name].bind(conn.default_channel).declare()  # as a worker does
    app.close()

    queues = broker.queues()
    for name in (COORDINATOR_QUEUE, NODES_QUEUE, EFFECTS_QUEUE, AGENTS_QUEUE, IO_QUEUE, "gpu"):
        assert queues[name]["type"] == "quorum", name
        assert queues[name]["arguments"] == DLX_ARGS, name
    # declared with the first of them: a dead letter never goes to a missing queue
    assert queues[DEAD_LETTER_QUEUE]["type"] == "quorum"
    assert queues[DEAD_LETTER_QUEUE]["arguments"] == {"x-queue-type": "quorum"}
    exchanges = {e["name"]: e["type"] for e in broker.ctl("list_exchanges", "name", "type")}
    assert exchanges[DEAD_LETTER_QUEUE] == exchanges[NODES_QUEUE] == "direct"
    bindings = broker.ctl("list_bindings", "source_name", "destination_name", "routing_key")
    assert {"source_name": DEAD_LETTER_QUEUE, "destination_name": DEAD_LETTER_QUEUE,
            "routing_key": DEAD_LETTER_QUEUE} in bindings


def test_redis_profile_is_unchanged_and_drain_does_not_connect() -> None:
    settings = Settings(broker_url=UNUSED_BACKEND, result_backend=UNUSED_BACKEND,
                        store_url="sqlite://", embedded=False)
    conf = celery_config(settings)
    assert all(not (q.queue_arguments or {}) for q in conf["task_queues"])
    app = Celery("redis-profile")
    app.config_from_object(conf)
    assert drain_dead_letters(app, lambda m: None) == 0  # port 1: it would fail to connect
    app.close()


# -- (b) delivery limit -> dead letter -> drained, decoded ------------------------------
def test_past_its_delivery_limit_a_message_is_dead_lettered_and_drained(broker: Broker) -> None:
    app = broker.app()
    queue = rabbit.declare_queue(app, "itest.limited", LIMIT)
    with Connection(broker.url) as conn:
        queue.bind(conn.default_channel).declare()
    _publish(broker.url, exchange="itest.limited", routing_key="itest.limited",
             task="itest.node", task_id="run-b.1.n", args=[{"run_id": "run-b"}, "x"])
    deliveries = 0
    with Connection(broker.url) as conn:
        bound = queue.bind(conn.default_channel)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            message = bound.get(no_ack=False)
            if message is None:
                if deliveries > LIMIT:
                    break  # dead-lettered
                time.sleep(0.02)  # not committed yet / not back yet
                continue
            deliveries += 1
            message.reject(requeue=True)
    assert deliveries == LIMIT + 1
    wait_until(lambda: broker.ready(DEAD_LETTER_QUEUE) == 1, timeout=10,
               what="the dead letter")
    # a body that does not decode, dead-lettered by hand
    _publish(broker.url, exchange=DEAD_LETTER_QUEUE, routing_key=DEAD_LETTER_QUEUE,
             task="itest.node", task_id="run-b.2.n", args=[], body=b"\x80\x04garbage",
             content_type="application/x-python-serialize")
    wait_until(lambda: broker.ready(DEAD_LETTER_QUEUE) == 2, timeout=10, what="2 letters")

    got: list[DeadMessage] = []
    assert drain_dead_letters(app, got.append) == 2
    assert got[0] == DeadMessage(task="itest.node", task_id="run-b.1.n",
                                 args=[{"run_id": "run-b"}, "x"], kwargs={"k": 2},
                                 queue="itest.limited", delivery_count=LIMIT + 1,
                                 reason="delivery_limit")
    assert got[1] == DeadMessage(task="?", task_id="run-b.2.n", args=[], kwargs={},
                                 queue=None, delivery_count=1, reason="malformed")
    assert broker.ready(DEAD_LETTER_QUEUE) == 0
    assert drain_dead_letters(app, got.append) == 0
    app.close()


# -- (c) a failing handler loses nothing ----------------------------------------------
def test_a_failing_handler_loses_nothing(broker: Broker) -> None:
    app = broker.app()
    ids = [f"run-c.{i}.n" for i in range(3)]
    with Connection(broker.url) as conn:
        rabbit.dead_letter_queue().bind(conn.default_channel).declare()
    for task_id in ids:
        _publish(broker.url, exchange=DEAD_LETTER_QUEUE, routing_key=DEAD_LETTER_QUEUE,
                 task="itest.node", task_id=task_id, args=[task_id])
    wait_until(lambda: broker.ready(DEAD_LETTER_QUEUE) == 3, timeout=10, what="3 letters")
    seen: list[str] = []

    def flaky(message: DeadMessage) -> None:
        seen.append(message.task_id)
        if len(seen) == 2:
            raise RuntimeError("store down")

    assert drain_dead_letters(app, flaky) == 1
    assert len(seen) == 2
    wait_until(lambda: broker.ready(DEAD_LETTER_QUEUE) == 2, timeout=10,
               what="the failed letter back in the queue")
    again: list[DeadMessage] = []
    assert drain_dead_letters(app, again.append, limit=1) == 1  # limit honoured
    assert drain_dead_letters(app, again.append) == 1
    assert seen[1] in [m.task_id for m in again]  # the one its handler failed on
    assert sorted(m.task_id for m in again) == sorted(set(ids) - {seen[0]})
    assert broker.ready(DEAD_LETTER_QUEUE) == 0
    app.close()


# -- (d) real workers: poison messages, retries ----------------------------------------
@dataclass
class RabbitWorker:
    broker: Broker
    control: Celery
    worker: Worker
    side: redis.Redis


@pytest.fixture(scope="module")
def rabbit_worker(amqp_url: str, itest_redis: RedisDbs, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[RabbitWorker]:
    side_url = itest_redis.dedicated
    clear_db(side_url)
    store = f"sqlite:///{tmp_path_factory.mktemp('rabbit-dl') / 'hypha.db'}"
    with _private_vhost(amqp_url) as url:
        broker = Broker(url.rsplit("/", 1)[1], url, side_url)
        control = Celery("test-control")
        control.config_from_object(celery_config(broker.settings(store)))
        backends = Backends("rabbitmq", url, side_url, store)
        worker = Worker(backends, tmp_path_factory.mktemp("rabbit-dl") / "worker.log",
                        queues=[NODES_QUEUE, DEAD_LETTER_QUEUE], concurrency=1, app=APP,
                        env={"HYPHA_DELIVERY_LIMIT": str(LIMIT),
                             "HYPHA_BROKER_DELIVERY_LIMIT": str(LIMIT)})
        side = redis.Redis.from_url(side_url)
        try:
            worker.start(control)
            yield RabbitWorker(broker, control, worker, side)
        finally:
            worker.stop()
            control.close()
            side.close()


def test_a_task_that_kills_its_worker_process_ends_in_the_dead_letter_queue(
        rabbit_worker: RabbitWorker) -> None:
    rw, token = rabbit_worker, uuid.uuid4().hex
    result = rw.control.send_task(malformed_app.CRASH_TASK, args=[token], queue=NODES_QUEUE,
                                  ignore_result=True)

    def crashes() -> int:
        return sum(1 for t in rw.side.lrange(malformed_app.CRASH_KEY, 0, -1)
                   if t.decode() == token)

    wait_until(lambda: rw.broker.ready(DEAD_LETTER_QUEUE) == 1, what="the poison message "
               "in hypha.dead_letter", log=rw.worker.tail)
    time.sleep(1.0)  # nobody consumes the dead letter: it is not run again
    assert crashes() == LIMIT + 1, rw.worker.tail()
    assert rw.broker.stats(DEAD_LETTER_QUEUE) == (1, 0)  # not consumed, though in -Q
    assert rw.broker.stats(NODES_QUEUE) == (0, 1)
    # no native delayed delivery plumbing (hypha's exchanges are direct)
    assert not [name for name in rw.broker.queues() if name.startswith("celery_delayed")]
    assert rw.worker.proc is not None and rw.worker.proc.poll() is None

    app = rw.broker.app()
    got: list[DeadMessage] = []
    assert drain_dead_letters(app, got.append) == 1
    app.close()
    assert got == [DeadMessage(task=malformed_app.CRASH_TASK, task_id=result.id, args=[token],
                               kwargs={}, queue=NODES_QUEUE, delivery_count=LIMIT + 1,
                               reason="delivery_limit")]


@pytest.mark.parametrize("countdown", [0.3, 1.2])
def test_retries_with_a_countdown_run_again_on_quorum_queues(
        rabbit_worker: RabbitWorker, countdown: float) -> None:
    """Sub-second countdowns included: Celery's native delayed delivery (topic exchanges)
    would refuse them; on hypha's direct exchanges the worker holds the ETA message."""
    rw, token = rabbit_worker, uuid.uuid4().hex
    before = rw.broker.ready(DEAD_LETTER_QUEUE)
    rw.control.send_task(malformed_app.FLAKY_TASK, args=[token, countdown], queue=NODES_QUEUE,
                         ignore_result=True)
    key = malformed_app.FLAKY_KEY + token
    wait_until(lambda: rw.side.llen(key) >= 3, what="three attempts", log=rw.worker.tail)
    at = [float(t) for t in rw.side.lrange(key, 0, -1)]
    assert len(at) == 3
    assert all(b - a >= countdown - 0.05 for a, b in zip(at, at[1:], strict=False)), at
    assert rw.broker.ready(DEAD_LETTER_QUEUE) == before
    log = rw.worker.tail(200_000)
    assert "Direct exchanges are not supported" not in log
    assert "direct exchange" not in log, log


def test_changing_the_delivery_limit_needs_new_queues(broker: Broker) -> None:
    """RabbitMQ refuses to redeclare a queue with other arguments: every process of one
    deployment must use the same HYPHA_DELIVERY_LIMIT (documents the constraint)."""
    with Connection(broker.url) as conn:
        rabbit.quorum_queue("itest.limit", LIMIT).bind(conn.channel()).declare()
        with pytest.raises(conn.channel_errors, match="x-delivery-limit"):
            rabbit.quorum_queue("itest.limit", LIMIT + 1).bind(conn.channel()).declare()
