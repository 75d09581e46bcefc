"""A recovery case's compensation runs exactly once when its worker dies mid-call: a real
``celery worker`` (prefork) of :mod:`tests.integration.recovery_cases_app` on Redis +
PostgreSQL, its whole process group SIGKILLed while the compensation sleeps inside its
call; the recovery supervisor (a thread of the test) asks the compensation's receipt
and either takes its answer (the release was applied) or runs the next attempt (it was
not). Either way the release is applied once, the case records one compensation and
escalates to human review, and the log stays well formed."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import redis

from hypha_celery import Hypha
from tests.integration import recovery_cases_app as app
from tests.integration.chaos_app import SIDE_ENV
from tests.integration.helpers import Backends, close_client, of_kind, purge, queues_of, wait_until
from tests.integration.test_chaos import (  # noqa: F401  (chaos_redis: a fixture)
    LEASE,
    VISIBILITY,
    WORKER_ENV,
    GroupWorker,
    Sweeper,
    chaos_redis,
)

pytestmark = pytest.mark.services

APP = "tests.integration.recovery_cases_app:celery"


def client_for(backends: Backends) -> Hypha:
    settings = dataclasses.replace(backends.settings(), visibility_timeout=VISIBILITY,
                                   lease_interval=LEASE)
    client = app.build(settings)
    client.store.migrate()
    return client


def counts(side: redis.Redis, key: str, run_id: str) -> int:
    return int(side.hget(key, run_id) or 0)


@pytest.mark.parametrize("mode", ["after", "before"])
def test_a_compensation_runs_exactly_once_when_its_worker_dies(
        mode: str, chaos_redis: str, pg_url: str, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIDE_ENV, chaos_redis)  # the receipt runs in the supervisor, here
    backends = Backends("redis", chaos_redis, chaos_redis, pg_url)
    client = client_for(backends)
    names = queues_of(client)
    purge(backends.broker_url, names)
    side = redis.Redis.from_url(chaos_redis)

    def new_worker() -> GroupWorker:
        return GroupWorker(backends, tmp_path / "worker.log", queues=names, concurrency=2,
                           app=APP, env=WORKER_ENV)

    worker = new_worker()
    try:
        worker.start(client.celery)
        with Sweeper(client._rt) as sweeper:
            run = client.start("rc_booking", {"mode": mode})
            wait_until(lambda: counts(side, app.CALLS, run.id) == 1, 30,
                       "the compensation to start", worker.tail)
            time.sleep(0.5)  # mid-call: its node.execution.started committed
            worker.kill()
            worker = new_worker().start(client.celery)
            wait_until(lambda: run.status().status == "waiting_human", 60,
                       "the case to escalate", worker.tail)
            assert not sweeper.errors
        events = run.events()
        assert counts(side, app.APPLIED, run.id) == 1  # the release applied once
        (compensated,) = of_kind(events, "recovery.case.compensated")
        assert compensated.data["compensates"] == "Reserve"
        (escalated,) = of_kind(events, "recovery.case.escalated")
        assert (escalated.data["reason"], escalated.data["compensated"]) == (
            "not_retryable:validation", ["Reserve"])
        started = of_kind(events, "node.execution.started")
        releases = [e for e in started if e.data["node_id"] == "release"]
        if mode == "after":  # the receipt says it happened: no second call
            (reconciled,) = of_kind(events, "recovery.outcome.reconciled")
            assert reconciled.data["source"] == "receipt"
            assert counts(side, app.CALLS, run.id) == 1 and len(releases) == 1
            assert client.store.get(run.id)["state"]["released_by"] == "receipt"
        else:  # it did not: the next attempt runs it, once
            assert counts(side, app.CALLS, run.id) == 2
            assert [e.data["attempt"] for e in releases] == [1, 2]
            assert client.store.get(run.id)["state"]["released_by"] == "call"
        path = client.store.get(run.id)["fsm"]["path"]
        assert path == ["Reserve", "Charge", "Compensating", "HumanReview"]
        client.reject(run.id, by="ops", reason="call the customer")
        wait_until(lambda: run.status().status == "failed", 30, "the run to fail",
                   worker.tail)
        assert counts(side, app.APPLIED, run.id) == 1
        assert [e.seq for e in run.events()] == list(range(1, len(run.events()) + 1))
    finally:
        worker.stop()
        close_client(client)
        side.close()
