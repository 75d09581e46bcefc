"""``hypha worker --profile io``: one real worker process (gevent's pool, a greenlet per
turn) runs many agent turns against a slow local model server at once, instead of one
per process; the watchdog and an interrupt still end a turn waiting on the provider."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import redis

from hypha_celery import Hypha
from hypha_celery.backends import OpenAIBackend
from hypha_celery.runtime.config import IO_QUEUE
from tests.cli.helpers import HYPHA
from tests.fakes.llm_server import FakeLLM, Reply
from tests.integration.agents_app import Asker
from tests.integration.burst_app import END_AT
from tests.integration.conftest import RedisDbs
from tests.integration.helpers import REPO, Backends, clear_db, close_client, purge, wait_until

pytestmark = pytest.mark.services

APP = "tests.integration.agents_app:hypha"
TURNS = 40
DELAY = 2.0


@contextmanager
def io_worker(backends: Backends, client: Hypha, log: Path, app: str = APP
              ) -> Iterator[psutil.Process]:
    """``hypha worker --profile io`` (its defaults: gevent, 1000, hypha.agents + hypha.io)."""
    name = f"io{uuid.uuid4().hex[:10]}@{socket.gethostname()}"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [HYPHA, "worker", "--app", app, "--profile", "io", "--loglevel", "WARNING",
             f"--hostname={name}", "--without-mingle", "--without-gossip"],
            cwd=REPO, env=backends.env(OPENAI_API_KEY="sk-io-test"), stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: proc.poll() is None and client.celery.control.ping(
            destination=[name], timeout=1.0), 60, "the io worker to answer ping",
            lambda: log.read_text(errors="replace")[-3000:])
        yield psutil.Process(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def backends(itest_redis: RedisDbs, pg_url: str) -> Backends:
    url = itest_redis.dedicated
    clear_db(url)
    return Backends("redis", url, url, pg_url)


def test_the_io_profile_overlaps_many_agent_turns_in_one_process(
        backends: Backends, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-io-test")  # checked at start, sent per turn
    client = Hypha(backends.settings())
    client.store.migrate()
    purge(backends.broker_url, sorted(client.queues()))
    log = tmp_path / "io-worker.log"
    try:
        with FakeLLM(default=Reply.text("slow answer", delay_s=DELAY)) as fake, \
                io_worker(backends, client, log) as worker:
            assert worker.cmdline()[-1] == "--without-gossip"
            names = [f"asker-{uuid.uuid4().hex[:8]}" for _ in range(TURNS)]
            for name in names:
                client.agents.start(Asker, name=name, backend=OpenAIBackend,
                                    model="gpt-test", base_url=fake.openai_url)
            began = time.monotonic()
            refs = [(name, client.agents.tell(name, "hello")) for name in names]
            threads = 0

            def done() -> bool:
                nonlocal threads
                threads = max(threads, worker.num_threads())
                return all(client.agents.poll(n, r).status != "pending" for n, r in refs)

            wait_until(done, 60, "every turn to end", lambda: log.read_text()[-3000:])
            elapsed = time.monotonic() - began
            polls = [client.agents.poll(n, r) for n, r in refs]
            assert {(p.status, p.response.text if p.response else p.reason)
                    for p in polls} == {("completed", "slow answer")}
            # one process, the turns in flight together: far from TURNS x DELAY
            assert fake.stats()["max_in_flight"] >= TURNS * 0.75, fake.stats()
            assert elapsed < TURNS * DELAY / 4, elapsed
            # greenlets, not threads: a fixed few, whatever the turns in flight
            assert threads <= 20, threads
            assert "gevent" in " ".join(worker.cmdline())  # the patched process
    finally:
        close_client(client)


BURST = 300


def test_a_burst_of_tasks_ending_at_once_is_acknowledged_whole(
        backends: Backends, tmp_path: Path) -> None:
    """BURST tasks acknowledged late end at the same moment in one io worker: each acks
    from its own greenlet at once, more than kombu's default ten broker connections; every
    ack lands (none left in the broker's unacknowledged set, no ``Couldn't ack``)."""
    client = Hypha(backends.settings())
    purge(backends.broker_url, sorted(client.queues()))
    broker = redis.Redis.from_url(backends.broker_url)
    log = tmp_path / "io-worker.log"
    try:
        with io_worker(backends, client, log, app="tests.integration.burst_app:hypha"):
            at = time.time() + 4.0
            results = [client.celery.send_task(END_AT, args=(at,), queue=IO_QUEUE)
                       for _ in range(BURST)]

            def acked() -> bool:
                return (all(r.ready() for r in results) and broker.hlen("unacked") == 0
                        and broker.llen(IO_QUEUE) == 0)

            wait_until(acked, 60, "every task to end and be acknowledged",
                       lambda: f"unacked: {broker.hlen('unacked')}; "
                               f"{log.read_text(errors='replace')[-3000:]}")
            # (read, not ``get()``: an in-process worker of an earlier test in this
            # process may have told Celery that joining a result would block)
            assert {r.result for r in results} == {"ended"}
        assert "Couldn't ack" not in log.read_text(errors="replace")
    finally:
        broker.close()
        close_client(client)


@pytest.mark.parametrize("how", ["watchdog", "interrupt"])
def test_a_turn_waiting_on_the_provider_in_a_gevent_worker_ends_at_once(
        backends: Backends, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        how: str) -> None:
    """The provider answers only after 20 s: in the io worker (gevent's pool, the socket
    waited on by a greenlet) the watchdog (3 s: a cold worker imports the SDK first) or an
    interrupt ends the turn waiting on it long before."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-io-test")
    client = Hypha(backends.settings())
    client.store.migrate()
    purge(backends.broker_url, sorted(client.queues()))
    log = tmp_path / "io-worker.log"
    try:
        with FakeLLM(default=Reply.text("late", delay_s=20)) as fake, \
                io_worker(backends, client, log):
            options = {"watchdog_ms": 3000} if how == "watchdog" else {}
            name = f"slow-{uuid.uuid4().hex[:8]}"
            client.agents.start(Asker, name=name, backend=OpenAIBackend, model="gpt-test",
                                base_url=fake.openai_url, **options)
            began = time.monotonic()
            ref = client.agents.tell(name, "hello")
            if how == "interrupt":
                wait_until(lambda: fake.requests, 30, "the request to reach the provider",
                           lambda: log.read_text()[-3000:])
                assert client.agents.interrupt_request(name, ref) == "accepted"
            wait_until(lambda: client.agents.poll(name, ref).status != "pending", 30,
                       "the turn to end", lambda: log.read_text()[-3000:])
            assert time.monotonic() - began < 12
            assert fake.requests  # the request was waiting on the provider
            poll = client.agents.poll(name, ref)
            reason = "timeout" if how == "watchdog" else "interrupted"
            assert (poll.status, poll.reason) == ("error", reason), poll
    finally:
        close_client(client)
