"""How long ``hypha runs`` takes to list a page: :meth:`EventStore.list_runs` (50 rows,
newest first) on a store of ``RUNS`` (100,000) runs of 20 graphs and 1,000 users (10
sessions each), 90 % completed, 9 % cancelled, 1 % failed, created one a second.

Each case is timed ``SAMPLES`` times after a warm-up (p50 / p95 in ms): no filter, each
filter alone (a common and a rare status), graph + status, user + session, a time window,
the user's listing through the scoped store (``--as-user``), and a deep page (keyset
``before`` an id near the oldest). Rows are bulk-inserted (no events: a listing reads
the rows only) into a private PostgreSQL database (``BENCH_PG_ADMIN_URL``;
``VACUUM ANALYZE`` after the load) and a SQLite file. The target: p50 <= 20 ms on every
case and backend.

    python -m bench.runs_list       # ~1 min; BENCH_RUNS_LIST_RUNS=20000
"""

from __future__ import annotations

import os
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


from bench._harness import PG_ADMIN_URL, run_bench, target
from hypha_celery.events.fold import new_view
from hypha_celery.store import EventStore, RunFilter, scratch_database
from hypha_celery.store.projection import columns_of, doc_of
from hypha_celery.store.schema import runs

RUNS = int(os.environ.get("BENCH_RUNS_LIST_RUNS", "100000"))
SAMPLES = int(os.environ.get("BENCH_RUNS_LIST_SAMPLES", "50"))
T0 = 1_700_000_000.0
TARGET_MS = 20.0


def load_runs(store: EventStore, count: int = RUNS) -> None:
    """Migrate ``store`` and bulk-insert ``count`` run rows (no events): graph ``graph-{i %
    20}``, user ``user-{i % 1000}``, session ``user-{u}-s{i // 1000 % 10}``, 1 % failed, 9 %
    cancelled, the rest completed, created at ``T0 + i``; then ``VACUUM ANALYZE`` on
    PostgreSQL. ``bench/console.py`` seeds its runs list with it too."""
    store.migrate()
    batch: list[dict[str, Any]] = []
    with store.engine.begin() as conn:
        for i in range(count):
            view = new_view(uuid.uuid4().hex)
            status = "failed" if i % 100 == 7 else "cancelled" if i % 11 == 3 else "completed"
            view.update(graph_id=f"graph-{i % 20}", status=status, user_id=f"user-{i % 1000}",
                        session_id=f"user-{i % 1000}-s{i // 1000 % 10}", created_at=T0 + i,
                        updated_at=T0 + i + 30, input={"question": "x" * 200},
                        state={"answer": "y" * 500})
            batch.append({**columns_of(view), "run_id": view["run_id"], "seq": 12,
                          "doc": doc_of(view)})
            if len(batch) == 5000:
                conn.execute(runs.insert(), batch)
                batch.clear()
        if batch:
            conn.execute(runs.insert(), batch)
    if store.dialect == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.exec_driver_sql("VACUUM ANALYZE hypha_runs")


def _time(fn: Callable[[], object]) -> dict[str, float]:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(SAMPLES):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return {"p50_ms": round(statistics.median(samples), 3),
            "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 3)}


def _measure(url: str) -> dict[str, Any]:
    store = EventStore(url)
    try:
        t = time.monotonic()
        load_runs(store)
        loaded = round(time.monotonic() - t, 1)
        deep = RUNS // 50  # an id near the oldest: the 1,000th page of 50 unfiltered
        scoped = store.scoped("user-42")
        cases: dict[str, Callable[[], object]] = {
            "no_filter": lambda: store.list_runs(limit=50),
            "graph": lambda: store.list_runs(RunFilter(graph_id="graph-3")),
            "status_common": lambda: store.list_runs(RunFilter(status="completed")),
            "status_rare": lambda: store.list_runs(RunFilter(status="failed")),
            "graph_status_rare": lambda: store.list_runs(
                RunFilter(graph_id="graph-7", status="failed")),
            "user": lambda: store.list_runs(RunFilter(user_id="user-42")),
            "user_session": lambda: store.list_runs(
                RunFilter(user_id="user-42", session_id="user-42-s3")),
            "created_window": lambda: store.list_runs(
                RunFilter(created_since=T0 + RUNS / 2, created_until=T0 + RUNS / 2 + 3600)),
            "scoped_user_graph": lambda: scoped.list_runs(RunFilter(graph_id="graph-2")),
            "deep_page": lambda: store.list_runs(limit=50, before=deep),
            "deep_page_graph": lambda: store.list_runs(RunFilter(graph_id="graph-3"),
                                                       before=deep),
        }
        out: dict[str, Any] = {"runs": RUNS, "load_s": loaded}
        for name, fn in cases.items():
            assert fn(), name  # every case lists something
            out[name] = _time(fn)
        return out
    finally:
        store.dispose()


def bench() -> dict[str, Any]:
    out: dict[str, Any] = {"runs": RUNS, "samples": SAMPLES}
    with scratch_database(PG_ADMIN_URL, prefix="hypha_bench_runs_") as url:
        out["postgresql"] = _measure(url)
    with tempfile.TemporaryDirectory(prefix="hypha-bench-runs-") as tmp:
        out["sqlite"] = _measure(f"sqlite:///{tmp}/runs.db")
    out["targets"] = [target(f"{backend}_{case}_p50_ms", out[backend][case]["p50_ms"], "<=",
                             TARGET_MS)
                      for backend in ("postgresql", "sqlite")
                      for case, value in out[backend].items() if isinstance(value, dict)]
    return out


if __name__ == "__main__":
    sys.exit(run_bench("runs_list", bench))
