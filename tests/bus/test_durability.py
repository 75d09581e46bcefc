"""The bus across restarts, with a real ``celery worker`` process, Redis and PostgreSQL:
the store is the truth, the wake-up task a nudge."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.beat import supervisor
from hypha_celery.bus import Message, MessageStatus, Scope, agent, human
from hypha_celery.testing.worker import WorkerProcess, fresh_store_url
from tests.bus.agents import Stage
from tests.bus.support import settled
from tests.integration.helpers import REPO

APP = "tests.bus.worker_app:build"
SCOPE = Scope("alice", "s1")
ALICE = human("alice")


def says(text: str) -> list[BackendEvent]:
    return [BackendEvent.new("text", {"text": text}), BackendEvent.new("result", {})]


def task(prompt: str) -> Message:
    return Message.model_validate({"type": "task", "user_id": "alice", "session_id": "s1",
                                   "from": ALICE, "to": agent("w"), "payload": prompt})


@pytest.fixture
def store_url(pg_url: str, tmp_path: Path) -> Iterator[str]:
    with fresh_store_url(tmp_path, pg_url) as url:
        yield url


def worker(redis_url: str, store_url: str, tmp_path: Path, name: str) -> WorkerProcess:
    return WorkerProcess(APP, broker_url=redis_url, store_url=store_url,
                         log=tmp_path / f"{name}.log", cwd=REPO, concurrency=2)


def test_a_message_published_while_the_worker_is_down_is_delivered_after_restart(
        redis_url: str, store_url: str, tmp_path: Path) -> None:
    first = worker(redis_url, store_url, tmp_path, "first").start()
    try:
        first.client.agents.start(Stage, name="w", backend=MockBackend,
                                  scripts=[says("one"), says("two"), says("three"),
                                           says("four")])
        first.client.bus.publish(task("a"))
        reply = first.client.bus.receive(ALICE, SCOPE, timeout=60)
        assert reply is not None and reply.payload == "one", first.log()
        first.client.bus.acknowledge(reply.id)  # else redelivered past its ack deadline
    finally:
        first.stop()
    second = worker(redis_url, store_url, tmp_path, "second")
    sent = second.client.bus.publish(task("b"))  # no worker: the wake-up waits in Redis
    second.start(purge_queues=False)
    try:
        reply = second.client.bus.receive(ALICE, SCOPE, timeout=60)
        assert reply is not None and reply.payload == "two", second.log()
        assert reply.causation_id == sent.id
        second.client.bus.acknowledge(reply.id)
        done = settled(second.client.bus, sent.id)
        assert done is not None and done.status is MessageStatus.ACKNOWLEDGED
    finally:
        second.stop()
    third = worker(redis_url, store_url, tmp_path, "third")
    # "c" goes to the idle agent directly (its turn's task waits in the broker); "d"
    # queues behind it (its wake-up task waits in the broker)
    handed = third.client.bus.publish(task("c"))
    queued = third.client.bus.publish(task("d"))
    assert (handed.status, queued.status) == (MessageStatus.DELIVERED, MessageStatus.QUEUED)
    third.start()  # purges the queues: the broker lost both tasks
    try:
        assert third.client.bus.receive(ALICE, SCOPE, timeout=2) is None
        decisions = supervisor.sweep(third.client._rt, now=time.time() + 60)
        assert {"agent": "w", "action": "bus_rewoken", "why": "messages_waiting"} in decisions
        assert {"agent": "w", "action": "agent_redriven", "why": "never_taken"} in decisions
        for sent, text in ((handed, "three"), (queued, "four")):
            reply = third.client.bus.receive(ALICE, SCOPE, timeout=60)
            assert reply is not None and reply.payload == text, third.log()
            assert reply.causation_id == sent.id
            third.client.bus.acknowledge(reply.id)
    finally:
        third.stop()


def test_a_hand_off_parks_its_run_and_a_real_workers_reply_resumes_it(
        redis_url: str, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a real worker: the hand-off node parks the run (its task ends: run.suspended
    while the agent's turn is held at a gate), the agent's completion task publishes the
    reply and resumes the run in its own process (the node's next attempt reads it)."""
    monkeypatch.setenv("HYPHA_MOCK_GATE_URL", redis_url)  # the gate between processes
    w = WorkerProcess("tests.bus.worker_app:article", broker_url=redis_url,
                      store_url=store_url, log=tmp_path / "article.log", cwd=REPO,
                      concurrency=2, env={"HYPHA_MOCK_GATE_URL": redis_url}).start()
    try:
        w.client.agents.start(Stage, name="writer", backend=MockBackend,
                              scripts=[MockBackend.gate("handoff", says("a draft"),
                                                        timeout=60)])
        run = w.client.start("article", {"topic": "bees"}, user_id="alice",
                             session_id="s1")
        assert MockBackend.wait_blocked("handoff", timeout=30) is not None, w.log()
        end = time.monotonic() + 30
        while "run.suspended" not in [e.type for e in run.events()]:
            assert time.monotonic() < end, w.log()
            time.sleep(0.05)
        assert "awaiting_message" in w.client.store.get(run.id)  # no worker holds it
        MockBackend.release("handoff")
        assert run.wait(60)["published"] == "A DRAFT", w.log()
        kinds = [e.type for e in run.events()]
        assert kinds.index("run.suspended") < kinds.index("run.released"), kinds
        starts = [e.payload["attempt"] for e in run.events()
                  if e.type == "node.execution.started" and e.payload["node_id"] == "write"]
        assert starts == [1, 2]  # the attempt that parked, the one that read the reply
        released = [e.payload for e in run.events() if e.type == "run.released"]
        assert [(p["action"], p["attempt"]) for p in released] == [("message", 2)]
        for m in w.client.bus.messages(run_id=run.id):
            done = settled(w.client.bus, m.id)
            assert done is not None and done.status is MessageStatus.ACKNOWLEDGED
    finally:
        w.stop()
