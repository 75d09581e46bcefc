"""What tenant scoping costs a read: ``hypha.as_user(owner)`` against the unscoped ``hypha``.

A scoped client (:meth:`Hypha.as_user`, :class:`~hypha_celery.client.scoped.ScopedHypha`)
reads through :meth:`EventStore.scoped`: every projection read carries ``user_id = owner``
and ``events()`` first checks that the run is the owner's. This bench times, on a store
holding ``RUNS`` (10,000) runs of ``USERS`` (100) users written as :meth:`Hypha.start` and
the coordinator write them (``run.created`` with its ``user_id``, ``run.started``, a node
step's 6 events, the finish decision, ``run.completed``: 10 events; every 500th run a long
one of ``LONG_EVENTS`` (100) events):

* **get_run_status**: ``hypha.get_run(run_id).status()`` against
  ``hypha.as_user(owner).get_run(run_id).status()`` (the scoped client made per request,
  as a web handler would), on a random run of the table — the issue's target;
* **handle_status**: ``handle.status()`` on a handle made beforehand (the steady state of
  a client polling a run), unscoped handle against scoped handle;
* **events**: ``handle.events()`` of a ~100-event run, unscoped against scoped.

Each measurement is ``SAMPLES`` pairs timed one call at a time, the two variants
alternated (unscoped, scoped, scoped, unscoped, ...: the order flips every pair) on the
same run, after a warm-up. Reported per variant: p50 / p95 / mean in ms; the difference
of the p50s (the target: **<= 1 ms**, on every backend) and the median of the paired
differences beside it. Runs on a private PostgreSQL database (``BENCH_PG_ADMIN_URL``;
``VACUUM ANALYZE`` after the load, as autovacuum would have done) and on a SQLite file.
No Redis, no worker: an embedded ``Hypha`` that never starts a run.

    python -m bench.scoping      # ~2 min; BENCH_SCOPING_RUNS=2000 BENCH_SCOPING_SAMPLES=300
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import sqlalchemy as sa

from bench._harness import PG_ADMIN_URL, _git, run_bench, target
from bench.events import ANSWER, node_step
from hypha_celery import Hypha, Settings
from hypha_celery.client.run import RunHandle
from hypha_celery.errors import RunNotFound
from hypha_celery.events.fold import new_view
from hypha_celery.runtime import lifecycle
from hypha_celery.runtime.lanes import kickoff_id, lane_key
from hypha_celery.store import scratch_database

RUNS = int(os.environ.get("BENCH_SCOPING_RUNS", "10000"))
USERS = 100
LONG_EVERY = 500  # every 500th run has LONG_EVENTS events (20 of 10,000)
LONG_EVENTS = 100
SAMPLES = int(os.environ.get("BENCH_SCOPING_SAMPLES", "2000"))
WARMUP = 100
RUNS_PER_TX = 250
HANDLES = 200  # handles made beforehand for handle_status
TARGET_MS = 1.0

def _user(i: int) -> str:
    return f"user-{i % USERS:03d}"


def _write_run(tx: Any, run_id: str, i: int, events: int) -> None:
    """A run as ``Hypha.start`` creates it (``Hypha._create``: ``tx.create`` then
    ``run.created`` carrying the user id, then ``run.started``), ``events`` events in all,
    ended ``run.completed``."""
    user, session = _user(i), f"session-{i}"
    tx.create(new_view(run_id))
    lifecycle.record(tx, run_id, "run.created", {
        "graph_id": "bench_scoping", "input": {"question": f"question {i}"}, "user_id": user,
        "session_id": session, "lane": lane_key(user, session),
        "deadline": time.time() + 3600, "max_steps": 100, "notify": None,
        "idempotency_key": None})
    lifecycle.record(tx, run_id, "run.started", {"execution_id": kickoff_id(run_id)})
    n, step, body = 0, 1, events - 4  # created, started, <body>, finish decision, completed
    while n < body:
        for kind, data, idem in node_step(run_id, step)[:body - n]:
            tx.append(run_id, kind, data, idem=idem)
            n += 1
        step += 1
    tx.append(run_id, "decision.policy.recorded", {"step": step - 1, "type": "finish"})
    lifecycle.record(tx, run_id, "run.completed", {"result": {"answer": ANSWER}})


def _load(hypha: Hypha) -> tuple[list[tuple[str, str]], list[tuple[str, str]], float, int]:
    """``RUNS`` runs; returns (run id, owner) of all and of the long ones, seconds, events."""
    store = hypha.store
    store.migrate()
    everything: list[tuple[str, str]] = []
    long: list[tuple[str, str]] = []
    total = 0
    t0 = time.perf_counter()
    for first in range(0, RUNS, RUNS_PER_TX):
        with store.transaction() as tx:
            for i in range(first, min(first + RUNS_PER_TX, RUNS)):
                run_id = uuid.uuid4().hex
                events = LONG_EVENTS if i % LONG_EVERY == LONG_EVERY // 2 else 10
                _write_run(tx, run_id, i, events)
                total += events
                everything.append((run_id, _user(i)))
                if events == LONG_EVENTS:
                    long.append((run_id, _user(i)))
    return everything, long, time.perf_counter() - t0, total


def _check(hypha: Hypha, runs: list[tuple[str, str]], long: list[tuple[str, str]]) -> None:
    """The scope is real: the owner reads what the unscoped client reads, another user
    finds nothing, and a run row carries its user id."""
    run_id, owner = runs[len(runs) // 3]
    assert hypha.as_user(owner).get_run(run_id).status() == hypha.get_run(run_id).status()
    other = _user(int(owner.rsplit("-", 1)[1]) + 1)
    try:
        hypha.as_user(other).get_run(run_id)
    except RunNotFound:
        pass
    else:
        raise AssertionError("another user's client found the run")
    long_id, long_owner = long[0]
    mine, theirs = hypha.get_run(long_id).events(), hypha.as_user(long_owner).get_run(
        long_id).events()
    assert len(mine) == LONG_EVENTS and [e.seq for e in mine] == [e.seq for e in theirs]
    assert RunHandle(hypha.as_user(other), long_id).events() == []
    assert hypha.store.load(run_id)["user_id"] == owner  # type: ignore[index]


def _stats(samples: list[float]) -> dict[str, Any]:
    xs = sorted(samples)
    return {"n": len(xs), "p50_ms": round(statistics.median(xs), 4),
            "p95_ms": round(xs[max(0, int(len(xs) * 0.95) - 1)], 4),
            "mean_ms": round(statistics.fmean(xs), 4), "min_ms": round(xs[0], 4)}


def _ab(pairs: list[tuple[Callable[[], Any], Callable[[], Any]]], samples: int,
        seed: int) -> dict[str, Any]:
    """``samples`` pairs (a random one of ``pairs`` each), unscoped and scoped timed one
    call at a time, their order flipped every pair."""
    rng = random.Random(seed)
    clock = time.perf_counter
    a: list[float] = []
    b: list[float] = []
    for i in range(WARMUP + samples):
        fa, fb = pairs[rng.randrange(len(pairs))]
        first, second = (fa, fb) if i % 2 == 0 else (fb, fa)
        t0 = clock()
        first()
        t1 = clock()
        second()
        t2 = clock()
        if i < WARMUP:
            continue
        ta, tb = ((t1 - t0), (t2 - t1)) if i % 2 == 0 else ((t2 - t1), (t1 - t0))
        a.append(ta * 1000.0)
        b.append(tb * 1000.0)
    sa_, sb = _stats(a), _stats(b)
    return {"unscoped": sa_, "scoped": sb,
            "scoped_adds_p50_ms": round(sb["p50_ms"] - sa_["p50_ms"], 4),
            "scoped_adds_p95_ms": round(sb["p95_ms"] - sa_["p95_ms"], 4),
            "paired_difference_p50_ms": round(statistics.median(
                y - x for x, y in zip(a, b, strict=True)), 4)}


def _measure(store_url: str) -> dict[str, Any]:
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=store_url, embedded=True))
    try:
        runs, long, load_s, events = _load(hypha)
        out: dict[str, Any] = {"runs": len(runs), "users": USERS, "events_stored": events,
                               "load_s": round(load_s, 1)}
        if hypha.store.dialect == "postgresql":
            admin = sa.create_engine(store_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql("VACUUM ANALYZE")
            admin.dispose()
            out["vacuum_analyze"] = True
        _check(hypha, runs, long)

        def fresh(run_id: str, owner: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
            return (lambda: hypha.get_run(run_id).status(),
                    lambda: hypha.as_user(owner).get_run(run_id).status())

        def held(run_id: str, owner: str, what: str) -> tuple[Callable[[], Any],
                                                               Callable[[], Any]]:
            plain, scoped = hypha.get_run(run_id), hypha.as_user(owner).get_run(run_id)
            return getattr(plain, what), getattr(scoped, what)

        rng = random.Random(7)
        out["get_run_status"] = _ab([fresh(r, o) for r, o in runs], SAMPLES, 1)
        out["handle_status"] = _ab([held(r, o, "status") for r, o in rng.sample(runs, HANDLES)],
                                   SAMPLES, 2)
        out["events"] = _ab([held(r, o, "events") for r, o in long], SAMPLES // 2, 3)
        out["events"]["events_per_run"] = LONG_EVENTS
    finally:
        hypha.close()
    return out


def bench() -> dict[str, Any]:
    out: dict[str, Any] = {"hypha_commit": _git("rev-parse", "--short", "HEAD"),
                           "samples": SAMPLES, "warmup": WARMUP}
    with scratch_database(PG_ADMIN_URL, prefix="hypha_bench_scoping_") as url:
        out["postgresql"] = _measure(url)
    with tempfile.TemporaryDirectory(prefix="hypha-bench-scoping-") as tmp:
        out["sqlite"] = _measure(f"sqlite:///{tmp}/scoping.db")
    out["targets"] = [
        target(f"{backend}_scoping_adds_to_{what}_p50_ms",
               out[backend][what]["scoped_adds_p50_ms"], "<=", TARGET_MS)
        for backend in ("postgresql", "sqlite")
        for what in ("get_run_status", "handle_status", "events")]
    return out


def main() -> int:
    return run_bench("scoping", bench)


if __name__ == "__main__":
    sys.exit(main())
