"""``hypha worker --profile io``: one real worker process (a thread pool) runs many agent
turns against a slow local model server at once, instead of one per process."""

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

from hypha_celery import Hypha
from hypha_celery.backends import OpenAIBackend
from tests.cli.helpers import HYPHA
from tests.fakes.llm_server import FakeLLM, Reply
from tests.integration.agents_app import Asker
from tests.integration.conftest import RedisDbs
from tests.integration.helpers import REPO, Backends, clear_db, close_client, purge, wait_until

pytestmark = pytest.mark.services

APP = "tests.integration.agents_app:hypha"
TURNS = 40
DELAY = 2.0


@contextmanager
def io_worker(backends: Backends, client: Hypha, log: Path) -> Iterator[psutil.Process]:
    """``hypha worker --profile io`` (its defaults: threads, 500, hypha.agents + hypha.io)."""
    name = f"io{uuid.uuid4().hex[:10]}@{socket.gethostname()}"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [HYPHA, "worker", "--app", APP, "--profile", "io", "--loglevel", "WARNING",
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
            # a pool thread and a stream thread per turn, plus a fixed few
            assert threads <= 2 * TURNS + 40, threads
    finally:
        close_client(client)
