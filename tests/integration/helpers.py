"""Real worker processes for the integration tests, and assertions on event logs."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import kombu.pools
import redis
from celery import Celery

from hypha_celery import Event, Hypha, RunHandle, Settings
from hypha_celery.events import TERMINAL_KINDS
from hypha_celery.testing import waiting
from hypha_celery.testing.worker import purge as purge  # re-exported
from tests.integration import app as itest

REPO = Path(__file__).resolve().parents[2]
APP = "tests.integration.app:celery"
#: Worker log level (``HYPHA_ITEST_LOGLEVEL=INFO`` to see every task in the logs).
LOGLEVEL = os.environ.get("HYPHA_ITEST_LOGLEVEL", "WARNING")
#: Upper bound for anything a test waits on (runs take well under a second).
WAIT = 30.0


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT, what: str = "",
               log: Callable[[], str] | None = None) -> Any:
    """:func:`hypha_celery.testing.wait_until` with the integration tests' longer wait."""
    return waiting.wait_until(predicate, timeout, what, log)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPHA_")}
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -- isolation: a Redis database and a RabbitMQ vhost of this session's own ----------
#: Redis databases the integration tests may claim (db 0: README examples, db 9: the
#: rest of the suite, db 11: bench/). A claim is a key in the database itself.
CANDIDATE_DBS = (13, 14, 15, 12, 10, 8, 7, 6)
CLAIM_KEY = "hypha-itest:claim"
CLAIM_TTL = 1800


def claim_db(redis_base: str, token: str, skip: Sequence[str] = (),
             first: int | None = None) -> str:
    """A Redis URL on a database no concurrent test session uses, emptied (``first``:
    the database to try before the candidates)."""
    for db in (() if first is None else (first,)) + CANDIDATE_DBS:
        url = f"{redis_base}/{db}"
        if url in skip:
            continue
        client = redis.Redis.from_url(url)
        try:
            if client.set(CLAIM_KEY, token, nx=True, ex=CLAIM_TTL):
                clear_db(url)
                return url
        finally:
            client.close()
    raise RuntimeError(f"no free Redis database among {CANDIDATE_DBS} (claimed by other "
                       f"test sessions; a claim expires after {CLAIM_TTL}s)")


def clear_db(url: str) -> None:
    """Delete every key but the claim (a worker may have left messages behind)."""
    client = redis.Redis.from_url(url)
    try:
        for key in client.scan_iter(count=1000):
            if key != CLAIM_KEY.encode():
                client.delete(key)
    finally:
        client.close()


def release_db(url: str, token: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        if client.get(CLAIM_KEY) == token.encode():
            client.delete(CLAIM_KEY)
    finally:
        client.close()


@contextmanager
def rabbit_vhost(amqp_url: str) -> Iterator[str]:
    """``amqp_url`` on a private vhost (made with ``rabbitmqctl`` when this machine
    runs the broker), so that no other session's worker shares its queues; else
    ``amqp_url`` itself."""
    ctl = shutil.which("rabbitmqctl")
    parts = urlsplit(amqp_url)
    name = f"hypha_itest_{uuid.uuid4().hex[:10]}"
    if ctl is None or not _rabbitmqctl(ctl, "add_vhost", name):
        yield amqp_url
        return
    try:
        _rabbitmqctl(ctl, "set_permissions", "-p", name, parts.username or "guest",
                     ".*", ".*", ".*")
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))
    finally:
        _rabbitmqctl(ctl, "delete_vhost", name)


def _rabbitmqctl(ctl: str, *args: str) -> bool:
    try:
        done = subprocess.run([ctl, *args], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@dataclass(frozen=True)
class Backends:
    """Where a worker and its client meet: broker, result backend, event store."""

    name: str
    broker_url: str
    result_backend: str
    store_url: str

    def settings(self) -> Settings:
        return Settings(broker_url=self.broker_url, result_backend=self.result_backend,
                        store_url=self.store_url, embedded=False)

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(HYPHA_BROKER_URL=self.broker_url,
                         HYPHA_RESULT_BACKEND=self.result_backend,
                         HYPHA_STORE_URL=self.store_url, **extra)


class Worker:
    """One ``celery worker`` process of :data:`APP`."""

    def __init__(self, backends: Backends, log: Path, *, queues: Sequence[str],
                 pool: str = "prefork", concurrency: int = 2, app: str = APP,
                 env: dict[str, str] | None = None) -> None:
        self.name = f"w{uuid.uuid4().hex[:12]}@{socket.gethostname()}"
        self.log_path = log
        self.argv = [sys.executable, "-m", "celery", "-A", app, "worker", "-P", pool,
                     "-c", str(concurrency), "-Q", ",".join(queues), "-E",
                     "--without-mingle", "--without-gossip", "-l", LOGLEVEL,
                     "-n", self.name.split("@")[0] + "@%h"]
        self.env = backends.env(**(env or {}))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, control: Celery, timeout: float = 60.0) -> Worker:
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT)
        wait_until(lambda: self._pong(control), timeout, f"worker {self.name} to answer ping",
                   self.tail)
        return self

    def _pong(self, control: Celery) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.tail()}")
        return bool(control.control.ping(destination=[self.name], timeout=1.0))

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


@dataclass
class Stack:
    """A client Hypha and a worker process on the same backends."""

    backends: Backends
    client: Hypha
    worker: Worker
    redis: redis.Redis

    def wait(self, run: RunHandle, timeout: float = WAIT) -> Any:
        try:
            return run.wait(timeout=timeout)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n--- worker log ---\n{self.worker.tail()}") from None


def close_client(client: Hypha) -> None:
    """``Hypha.close()`` and the Celery app. Its broker connections stay in kombu's
    process-wide pools (shared by apps on the same URL); the session closes those
    at its very end (``release_pools``)."""
    client.close()
    client.celery.close()


def release_pools() -> None:
    """Close kombu's process-wide connection and producer pools (control commands
    over AMQP leave connections in them: ResourceWarning at exit otherwise)."""
    kombu.pools.reset()


def queues_of(client: Hypha) -> list[str]:
    return sorted(client.queues())


@contextmanager
def stack(backends: Backends, log: Path, *, duplicate: bool = False, pool: str = "prefork",
          env: dict[str, str] | None = None, app: str = APP) -> Iterator[Stack]:
    """Start a client and a worker on ``backends``; stop both at the end."""
    client = itest.build(backends.settings(), duplicate=duplicate)
    client.store.migrate()
    names = queues_of(client)
    purge(backends.broker_url, names)
    extra = dict(env or {})
    if duplicate:
        extra[itest.DUPLICATE_ENV] = "1"
    worker = Worker(backends, log, queues=names, pool=pool, env=extra, app=app)
    side = redis.Redis.from_url(backends.result_backend)
    try:
        worker.start(client.celery)
        yield Stack(backends, client, worker, side)
    finally:
        worker.stop()
        close_client(client)
        side.close()


# -- event-log assertions -----------------------------------------------------
def of_kind(events: Sequence[Event], *kinds: str) -> list[Event]:
    return [e for e in events if e.kind in kinds]


def assert_well_formed(events: Sequence[Event]) -> Event:
    """Gap-free seq from 1, exactly one terminal event (returned), nothing after
    it but late results."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    terminal = [i for i, e in enumerate(events) if e.kind in TERMINAL_KINDS]
    assert len(terminal) == 1, [e.kind for e in events]
    assert all(e.kind == "node.execution.late_result" for e in events[terminal[0] + 1:])
    return events[terminal[0]]


def assert_exactly_once(events: Sequence[Event]) -> None:
    """Every scheduled execution (node or edge) has exactly one ``node.execution.started`` and
    one outcome; every fan-out exactly one reducer outcome."""
    expected: list[str] = []
    fanouts: list[str] = []
    for e in events:
        if e.kind == "node.execution.scheduled":
            expected.append(e.data["execution_id"])
        elif e.kind == "node.fanout.scheduled":
            fanouts.append(e.data["execution_id"])
            expected.extend(edge["execution_id"] for edge in e.data["edges"])
    outcomes = Counter(e.data["execution_id"]
                       for e in of_kind(events, "node.execution.completed",
                                        "node.execution.failed"))
    started = Counter(e.data["execution_id"] for e in of_kind(events, "node.execution.started"))
    reduced = Counter(e.data["execution_id"]
                      for e in of_kind(events, "node.reducer.completed", "node.reducer.failed"))
    assert outcomes == Counter(expected), (outcomes, expected)
    assert started == Counter(expected), (started, expected)
    assert reduced == Counter(fanouts), (reduced, fanouts)
