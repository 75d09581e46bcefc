"""How fast the web console renders (issue 16): the runs list and a run's page, served by
the real app (:func:`hypha_celery.console.create_app`) under uvicorn and fetched over
real HTTP, with ``RUNS`` (100,000) runs and one run of ``BIG_EVENTS`` (10,000) events in
PostgreSQL.

The store (a private database, ``BENCH_PG_ADMIN_URL``) holds the runs of
``bench/runs_list.py`` (:func:`bench.runs_list.load_runs`: bulk-inserted rows of 20
graphs, 1,000 users with 10 sessions each, 1 % failed, 9 % cancelled) plus two runs
written through ``store.transaction()`` as the runtime writes them
(``lifecycle.record`` / ``tx.append``): a small one shaped like the demo's (classify, a
fan-out of 3 lookups reduced by ``merge``: 17 events) and a big one of ~10,000 events:
rounds of a ``classify`` step (one ``model.call.*`` with usage and cost) and a
fan-out of ``EDGES`` (4) ``lookup`` edges, each making a model call, reduced by ``merge``.
``VACUUM ANALYZE`` after the load.

The console runs in this process (uvicorn in a thread, an embedded ``Hypha`` that starts
nothing) and an ``httpx`` client signs in with ``Authorization: Bearer`` as an admin.
Each page is fetched ``WARMUP`` times, then ``SAMPLES`` (50) times, one at a time; p50 /
p95 / max of the wall time of the whole request (status 200 and the page's marker
checked every time). Target: p95 **<= 200 ms** on every page.

    python -m bench.console          # ~1 min; BENCH_CONSOLE_SAMPLES=20 for a quick look
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import PG_ADMIN_URL, run_bench, target
from bench.runs_list import RUNS, T0, load_runs
from hypha_celery import Hypha, Settings
from hypha_celery.events.fold import new_view
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore, scratch_database

SAMPLES = int(os.environ.get("BENCH_CONSOLE_SAMPLES", "50"))
WARMUP = 5
BIG_EVENTS = 10_000
EDGES = 4
TARGET_MS = 200.0
TOKEN = "bench-console-token-" + uuid.uuid4().hex
ANSWER = ("The retrieved passage discusses the operational limits of the system and the "
          "expected latency of each step.")


# -- the two runs with events -------------------------------------------------------------
class _Writer:
    """Appends one run's events with steadily rising timestamps."""

    def __init__(self, tx: Any, run_id: str, ts: float) -> None:
        self.tx, self.run_id, self.ts, self.count = tx, run_id, ts, 0

    def __call__(self, kind: Any, data: dict[str, Any], idem: str | None = None) -> None:
        self.ts += 0.004
        self.count += 1
        if kind.startswith("run."):
            lifecycle.record(self.tx, self.run_id, kind, data, idem=idem, ts=self.ts)
        else:
            self.tx.append(self.run_id, kind, data, idem=idem, ts=self.ts)


def _model_call(put: _Writer, eid: str, node: str, step: int, n: int) -> None:
    call = f"{eid}:m{n}"
    base = {"call_id": call, "execution_id": eid, "step": step, "node_id": node,
            "attempt": 1, "model": "openai:gpt-4.1-mini"}
    put("model.call.started", {**base, "request_hash": f"{step:016x}", "provider": "openai",
                               "request_bytes": 812})
    usage = {"input_tokens": 640 + step % 50, "output_tokens": 48 + n}
    put("model.call.completed", {**base, "output": {"text": ANSWER, "usage": usage,
                                                    "stop_reason": "end_turn"},
                                 "usage": usage, "latency_ms": 412.0 + n, "wait_ms": 0.1,
                                 "cost_usd": 0.000342})


def _node(put: _Writer, eid: str, node: str, step: int, update: dict[str, Any],
          calls: int, **edge: Any) -> None:
    put("node.execution.started", {"execution_id": eid, "node_id": node, "attempt": 1,
                                   "worker": "vm:4242"}, f"{eid}:started:1")
    for n in range(calls):
        _model_call(put, eid, node, step, n)
    put("node.execution.completed", {"execution_id": eid, "node_id": node, **edge,
                                     "update": update, "duration": 0.031}, f"{eid}:done")


def _classify(put: _Writer, run_id: str, step: int, calls: int) -> None:
    eid = f"{run_id}.{step}"
    put("decision.policy.recorded", {"step": step - 1, "type": "next",
                                     "node_ids": ["classify"]})
    put("node.execution.scheduled", {"execution_id": eid, "node_id": "classify",
                                     "input": {"question": "why?"}, "step": step})
    _node(put, eid, "classify", step, {"topic": "billing", "round": step}, calls)


def _fanout(put: _Writer, run_id: str, step: int, edges: int, calls: int) -> None:
    eid = f"{run_id}.{step}"
    sources = ["faq", "tickets", "wiki", "docs"][:edges] + ["more"] * max(0, edges - 4)
    put("decision.policy.recorded", {"step": step - 1, "type": "fanout", "reducer": "merge",
                                     "node_ids": ["lookup"] * edges})
    put("node.fanout.scheduled", {"execution_id": eid, "step": step, "reducer": "merge",
                                  "edges": [{"execution_id": f"{eid}.{i}", "node_id": "lookup",
                                             "input": s} for i, s in enumerate(sources)]})
    for i, source in enumerate(sources):
        _node(put, f"{eid}.{i}", "lookup", step, {"source": source, "hits": [ANSWER]}, calls,
              edge_of=eid, index=i)
    put("node.reducer.completed", {"execution_id": eid, "reducer": "merge", "duration": 0.0005,
                                   "update": {"docs": [{"source": s, "hits": [ANSWER]}
                                                       for s in sources]}})


def _write_run(store: EventStore, graph: str, cycles: int, edges: int, calls: int) -> str:
    """A completed run of ``cycles`` rounds (classify, then a fan-out of ``edges``
    lookups and a reducer), each node making ``calls`` model calls; its id."""
    run_id = uuid.uuid4().hex
    with store.transaction() as tx:
        tx.create(new_view(run_id))
        put = _Writer(tx, run_id, time.time() - 3600)
        put("run.created", {"graph_id": graph, "input": {"question": "Why was I charged?"},
                            "user_id": "user-7", "session_id": "user-7-s1", "lane": None,
                            "deadline": None, "max_steps": 10**6, "notify": None,
                            "idempotency_key": None})
        put("run.started", {"execution_id": f"{run_id}.0"})
        step = 1
        for _ in range(cycles):
            _classify(put, run_id, step, calls)
            _fanout(put, run_id, step + 1, edges, calls)
            step += 2
        put("decision.policy.recorded", {"step": step - 1, "type": "finish"})
        put("run.completed", {"result": {"topic": "billing", "answer": ANSWER}})
    return run_id


def _big_run(store: EventStore) -> tuple[str, int]:
    """About :data:`BIG_EVENTS` events: 9 + 4 * EDGES a round (classify: 6 with its
    call; the fan-out: its decision and schedule, 4 an edge with its call, the reducer)."""
    per_cycle = 6 + 2 + 4 * EDGES + 1
    cycles = (BIG_EVENTS - 4) // per_cycle
    run_id = _write_run(store, "support_big", cycles, EDGES, 1)
    return run_id, len(store.events(run_id))


# -- the server ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _serving(url: str) -> Iterator[str]:
    """The console for the store at ``url``, served by uvicorn in a thread; its base URL."""
    import uvicorn

    from hypha_celery.console import ConsoleConfig, create_app
    from hypha_celery.principals import Principal

    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=url, embedded=True))
    app = create_app(hypha, ConsoleConfig(tokens={TOKEN: Principal.admin("ops")}))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="console", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the console did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        hypha.close()


# -- the measurement ----------------------------------------------------------------------
def _pages(big: str, small: str) -> dict[str, tuple[str, str]]:
    """Page name -> (path, a string the page must contain)."""
    window = f"since={T0 + RUNS / 2:.0f}&until={T0 + RUNS / 2 + 3600:.0f}"
    return {
        "runs": ("/runs", "graph-"),
        "runs_graph": ("/runs?graph=graph-3", "graph-3"),
        "runs_status_common": ("/runs?status=completed", "completed"),
        "runs_status_rare": ("/runs?status=failed", "failed"),
        "runs_user": ("/runs?user=user-42", "user-42"),
        "runs_session": ("/runs?session=user-42-s3", "user-42-s3"),
        "runs_user_session": ("/runs?user=user-42&session=user-42-s3", "user-42-s3"),
        "runs_window": (f"/runs?{window}", "graph-"),
        "runs_graph_status_rare": ("/runs?graph=graph-7&status=failed", "graph-7"),
        "runs_deep_page": (f"/runs?before={RUNS // 50}", "graph-"),
        "run_big": (f"/runs/{big}", "Later events"),
        "run_big_after_5000": (f"/runs/{big}?after=5000", "Later events"),
        "run_big_last_page": (f"/runs/{big}?after={BIG_EVENTS - 500}", "Earlier events"),
        "run_small": (f"/runs/{small}", "merge"),
    }


def _time_page(client: Any, path: str, marker: str) -> dict[str, Any]:
    def fetch() -> float:
        t = time.perf_counter()
        r = client.get(path)
        took = (time.perf_counter() - t) * 1000
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        assert marker in r.text, (path, marker)
        return took

    for _ in range(WARMUP):
        fetch()
    samples = sorted(fetch() for _ in range(SAMPLES))
    size = len(client.get(path).content)
    return {"p50_ms": round(statistics.median(samples), 2),
            "p95_ms": round(samples[max(0, int(len(samples) * 0.95) - 1)], 2),
            "max_ms": round(samples[-1], 2), "bytes": size}


def _measure(url: str) -> dict[str, Any]:
    import httpx

    store = EventStore(url)
    try:
        t = time.monotonic()
        load_runs(store)
        small = _write_run(store, "support", 1, 3, 0)
        big, events = _big_run(store)
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.exec_driver_sql("VACUUM ANALYZE")
        out: dict[str, Any] = {"runs": RUNS + 2, "big_run_events": events,
                               "small_run_events": len(store.events(small)),
                               "load_s": round(time.monotonic() - t, 1)}
    finally:
        store.dispose()
    with _serving(url) as base, httpx.Client(
            base_url=base, headers={"authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        for name, (path, marker) in _pages(big, small).items():
            out[name] = _time_page(client, path, marker)
    return out


def bench() -> dict[str, Any]:
    out: dict[str, Any] = {"samples": SAMPLES, "warmup": WARMUP}
    with scratch_database(PG_ADMIN_URL, prefix="hypha_bench_console_") as url:
        out["postgresql"] = _measure(url)
    pages = {k: v for k, v in out["postgresql"].items() if isinstance(v, dict)}
    out["targets"] = [target(f"{name}_p95_ms", value["p95_ms"], "<=", TARGET_MS)
                      for name, value in pages.items()]
    return out


if __name__ == "__main__":
    sys.exit(run_bench("console", bench))
