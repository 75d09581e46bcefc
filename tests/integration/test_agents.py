"""Agents on real ``celery worker`` processes (Redis broker, PostgreSQL store): a worker
SIGKILLed mid-turn ends the turn ``task_crashed``, delivered once, and the agent keeps
serving from another worker; content-free turn telemetry reaches Flower as Celery events."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from hypha_celery import Hypha, RecoveryPolicy, WaitTimeout
from hypha_celery.agents import Channel, TurnFailed, callers
from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.backends.gate import GATE_URL_ENV
from hypha_celery.beat.supervisor import sweep
from hypha_celery.store import EventStore
from hypha_celery.store import agents as rows
from tests import services
from tests.integration.agents_app import Keeper
from tests.integration.conftest import RedisDbs
from tests.integration.helpers import (
    REPO,
    Backends,
    clear_db,
    close_client,
    purge,
    wait_until,
)
from tests.integration.test_chaos import GroupWorker

APP = "tests.integration.agents_app:celery"
LEASE = 0.5
FAST = RecoveryPolicy(grace=1.0, kickoff_lease=3.0)

pytestmark = pytest.mark.services


@dataclasses.dataclass
class Pair:
    client: Hypha
    workers: list[GroupWorker]
    backends: Backends

    def tail(self) -> str:
        return "\n".join(f"--- {w.name} ---\n{w.tail(3000)}" for w in self.workers)

    def owner_of(self, pid: int) -> GroupWorker:
        group = os.getpgid(pid)
        return next(w for w in self.workers if w.proc is not None and w.proc.pid == group)


@contextmanager
def pair(redis_url: str, pg_url: str, logs: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[Pair]:
    clear_db(redis_url)
    backends = Backends("redis", redis_url, redis_url, pg_url)
    monkeypatch.setenv(GATE_URL_ENV, redis_url)
    client = Hypha(dataclasses.replace(backends.settings(), lease_interval=LEASE))
    client.store.migrate()
    queues = sorted(client.queues())
    purge(redis_url, queues)
    env = {"HYPHA_LEASE_INTERVAL": str(LEASE), GATE_URL_ENV: redis_url}
    workers = [GroupWorker(backends, logs / f"agent-worker{i}.log", queues=queues,
                           concurrency=2, app=APP, env=env) for i in range(2)]
    try:
        for w in workers:
            w.spawn()
        for w in workers:
            w.ready(client.celery)
        yield Pair(client, workers, backends)
    finally:
        for w in workers:
            w.stop()
        close_client(client)


@pytest.fixture
def agent_redis(itest_redis: RedisDbs) -> str:
    return itest_redis.dedicated


def _start(client: Hypha, tag: str) -> str:
    name = f"keeper-{uuid.uuid4().hex[:8]}"
    scripts = [MockBackend.gate(tag, [BackendEvent.new("result", {"text": "never"})], timeout=60),
               [BackendEvent.new("result", {"text": "after"})]]
    client.agents.start(Keeper, name=name, backend=MockBackend, scripts=scripts)
    return name


def _wait_dispatch_saved(client: Hypha, name: str) -> None:
    """A stream that runs on has the session its dispatch changed saved (the gate's script
    consumed) within a few ms: a crash after that must not replay the script."""
    def saved() -> bool:
        doc = rows.read(client.store, name)
        return doc is not None and MockBackend.remaining(doc["session"]) == 1

    wait_until(saved, 10, "the dispatch-time session to be saved")


def _completions(client: Hypha, ch: Channel, quiet: float = 2.0) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while (msg := client.agents.receive(ch, timeout=quiet)) is not None:
        got.append(msg)
    return [m for m in got if m["type"] == "completion"]


def _turn_events(store: EventStore, incarnation: str) -> list[str]:
    return [f"{e.kind}:{e.data.get('reason', '')}" for e in store.events(incarnation)
            if e.kind.startswith("agent.turn.")]


def _assert_crashed_once(p: Pair, name: str, ref: str, ch: Channel, incarnation: str) -> None:
    poll = p.client.agents.poll(name, ref)
    assert (poll.status, poll.reason) == ("error", "task_crashed")
    (completion,) = _completions(p.client, ch)
    assert completion["ref"] == ref and completion["outcome"]["error"] == "task_crashed"
    assert _turn_events(p.client.store, incarnation) == [
        "agent.turn.started:", "agent.turn.failed:task_crashed"]
    # the agent keeps serving, from the worker that is left
    assert p.client.agents.ask(name, "second", timeout=30).text == "after"
    assert p.client.agents.status(name).agent_state == {
        "outcomes": [["error", "task_crashed"], ["ok", "after"]]}


def test_worker_group_sigkilled_mid_turn_ends_the_turn_task_crashed_once(
        agent_redis: str, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole worker (parent and pool) is killed: no broker redelivery comes for an hour
    (visibility timeout); the supervisor sees the owner's heartbeat stop and re-drives."""
    with pair(agent_redis, pg_url, tmp_path, monkeypatch) as p:
        tag = f"crash-{uuid.uuid4().hex}"
        name = _start(p.client, tag)
        incarnation = p.client.agents.whereis(name).incarnation  # type: ignore[union-attr]
        ch = p.client.agents.channel()
        ref = p.client.agents.tell_with_completion(name, "first", ch)
        blocked = MockBackend.wait_blocked(tag, 30)
        assert blocked is not None, p.tail()
        _wait_dispatch_saved(p.client, name)
        p.owner_of(blocked["pid"]).kill()
        began = time.monotonic()

        def recovered() -> bool:
            sweep(p.client._rt, policy=FAST)
            return p.client.agents.poll(name, ref).status != "pending"

        wait_until(recovered, 30, "the supervisor to re-drive the agent", p.tail)
        _assert_crashed_once(p, name, ref, ch, incarnation)
        assert time.monotonic() - began < 15


def test_pool_process_sigkilled_mid_turn_is_redelivered_and_ends_task_crashed_once(
        agent_redis: str, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the pool process dies: its parent requeues the message at once
    (``task_reject_on_worker_lost``); the next delivery waits until the dead owner's
    heartbeat is stale, then ends the turn. No supervisor involved."""
    with pair(agent_redis, pg_url, tmp_path, monkeypatch) as p:
        tag = f"crash-{uuid.uuid4().hex}"
        name = _start(p.client, tag)
        incarnation = p.client.agents.whereis(name).incarnation  # type: ignore[union-attr]
        ch = p.client.agents.channel()
        ref = p.client.agents.tell_with_completion(name, "first", ch)
        blocked = MockBackend.wait_blocked(tag, 30)
        assert blocked is not None, p.tail()
        _wait_dispatch_saved(p.client, name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(blocked["pid"], signal.SIGKILL)
        wait_until(lambda: p.client.agents.poll(name, ref).status != "pending", 30,
                   "the redelivered pump to end the turn", p.tail)
        _assert_crashed_once(p, name, ref, ch, incarnation)


SENTINEL = "PROMPT-SENTINEL-4711"


def test_turn_telemetry_reaches_flower_as_celery_events_without_content(
        agent_redis: str, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pair(agent_redis, pg_url, tmp_path, monkeypatch) as p:
        port = services.free_port()
        log = tmp_path / "flower.log"
        with log.open("ab") as out:
            flower = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", APP, "flower", f"--port={port}",
                 "--address=127.0.0.1"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                env=p.backends.env(FLOWER_UNAUTHENTICATED_API="true"))
        try:
            def counters() -> dict[str, int]:
                try:
                    reply = requests.get(f"http://127.0.0.1:{port}/workers?json=1", timeout=2)
                except requests.ConnectionError:
                    return {}
                total: dict[str, int] = {}
                for worker in reply.json()["data"] if reply.status_code == 200 else []:
                    for key, value in worker.items():
                        if key.startswith("hypha-agent-") and isinstance(value, int):
                            total[key] = total.get(key, 0) + value
                return total

            wait_until(lambda: _up(port), 30, "flower to answer",
                       lambda: log.read_text()[-3000:])
            name = f"keeper-{uuid.uuid4().hex[:8]}"
            p.client.agents.start(Keeper, name=name, backend=MockBackend, scripts=[
                [BackendEvent.new("result", {"text": "one"})], MockBackend.error("rate_limited")])
            assert p.client.agents.ask(name, f"{SENTINEL} one", timeout=30).text == "one"
            with pytest.raises(TurnFailed, match="rate_limited"):
                p.client.agents.ask(name, f"{SENTINEL} two", timeout=30)
            seen = wait_until(lambda: (c := counters()).get("hypha-agent-turn-error") and c,
                              30, "Flower to count the agent's turn events", p.tail)
            assert seen == {"hypha-agent-turn-start": 2, "hypha-agent-turn-stop": 1,
                            "hypha-agent-turn-error": 1}
            logs = log.read_text() + "".join(w.tail(1_000_000) for w in p.workers)
            assert SENTINEL not in logs
        finally:
            flower.send_signal(signal.SIGTERM)
            try:
                flower.wait(10)
            except subprocess.TimeoutExpired:
                flower.kill()
                flower.wait(5)


def _up(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/healthcheck", timeout=1).ok
    except requests.ConnectionError:
        return False


def test_a_queued_ask_of_a_sigkilled_caller_process_is_dropped_caller_down(
        agent_redis: str, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GenAgent scenario 13 across processes: the caller is another process, SIGKILLed
    while its ask waits in the queue. Its caller lease goes stale; the worker that takes
    the ask off the queue drops it unrun. A live caller whose wait timed out keeps its
    ask (it runs, after the dropped one's place)."""
    with pair(agent_redis, pg_url, tmp_path, monkeypatch) as p:
        tag = f"caller-{uuid.uuid4().hex}"
        name = f"keeper-{uuid.uuid4().hex[:8]}"
        p.client.agents.start(Keeper, name=name, backend=MockBackend, scripts=[
            MockBackend.gate(tag, [BackendEvent.new("result", {"text": "first"})], timeout=60),
            [BackendEvent.new("result", {"text": "after"})]])
        p.client.agents.tell(name, "first")
        assert MockBackend.wait_blocked(tag, 30) is not None, p.tail()
        code = ("import sys; from hypha_celery import Hypha; "
                "Hypha.from_env().agents.ask(sys.argv[1], 'from a doomed caller')")
        caller = subprocess.Popen([sys.executable, "-c", code, name],
                                  env=p.backends.env(HYPHA_LEASE_INTERVAL=str(LEASE)))
        try:
            wait_until(lambda: p.client.agents.status(name).queued == 1, 30,
                       "the caller's ask to be queued")
        finally:
            caller.kill()
            caller.wait()
        with pytest.raises(WaitTimeout):
            p.client.agents.ask(name, "live caller", timeout=0.1)
        time.sleep(callers.STALE_AFTER * LEASE + 0.5)
        MockBackend.release(tag)

        wait_until(lambda: p.client.agents.status(name).agent_state["outcomes"] == [
            ["ok", "first"], ["ok", "after"]], 30, "the live caller's ask to run", p.tail)
        incarnation = p.client.agents.whereis(name).incarnation  # type: ignore[union-attr]
        events = p.client.store.events(incarnation)
        dropped = [e.data for e in events if e.kind == "agent.request.cancelled"]
        assert [d["reason"] for d in dropped] == ["caller_down"]
        assert dropped[0]["ref"] not in {e.data.get("ref") for e in events
                                         if e.kind.startswith("agent.turn.")}
