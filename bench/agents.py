"""Conversational agents (issue 4): idle agents at scale, and the cost of a turn.

    .venv/bin/python bench/agents.py [idle|turn|all] [--agents N] [--start N] [--asks N]
                                     [--pool prefork|threads] [--concurrency C]

Each measurement runs in its own environment (a claimed Redis database, a fresh
PostgreSQL database, migrated) with ONE real ``celery -A bench.app:celery worker`` that
consumes ``hypha.agents`` (agent turns) and ``celery`` (the raw baseline task), and prints
one JSON object (also written to ``bench/results/agents_<name>.json``).

* **idle** (targets: <= 4 KB of storage per idle agent, no worker memory that grows with
  their number). A hot agent is served ``PHASE_TURNS`` turns (warm-up), the worker's RSS is
  taken, another ``PHASE_TURNS`` turns, RSS again (0 idle agents). Then ``--start`` agents
  are created through ``hypha.agents.start`` one at a time (timed) and the rest of
  ``--agents`` are bulk-loaded with ``COPY``: rows made from a row that ``start`` wrote,
  with only the name (same width), the incarnation and the Mock script-set id (uuid4 hex
  each) and the timestamps changed, so byte for byte the same shape (one ``hypha_agents``
  row and one ``agent.started`` event each; lanes are created lazily, on first input).
  Storage = growth of ``pg_total_relation_size`` of the agent tables (``hypha_agents``,
  ``hypha_events``, ``hypha_lanes``, ``hypha_lane_items``, ``hypha_agent_results``,
  ``hypha_agent_outbox``) over the number of agents, right after the load and after
  ``VACUUM ANALYZE`` (free-space and visibility maps); the larger is the target value.
  Then the hot agent is served ``PHASE_TURNS`` more turns and RSS is taken a third time.
  Worker memory delta = RSS(100k idle) - RSS(0 idle), both after serving turns; the drift of
  the turns alone (second RSS - first) is reported next to it. A bulk-loaded agent is
  asked once afterwards, to show the copied rows are live agents.
* **turn** (target: median overhead <= 15 ms). ``--asks`` sequential ``ask`` calls to one
  agent (MockBackend, one ``result`` event per turn), after a warm-up, interleaved with a
  raw Celery round trip (``bench.add.delay(1, 1).get()``) on the same broker, result
  backend and worker. Overhead = ask wall time - ``Response.duration_ms`` (the backend's
  own time). Also a breakdown from the agent's events (client clock and worker clock are
  the same machine's ``time.time()``): client -> ``agent.turn.started`` (admission, the
  pump message, claim, pre_turn), ``started -> agent.turn.completed`` (stream, seal,
  decide, record), completed -> ``ask`` returned (commit, wake-up, result read); and
  PostgreSQL transactions per ask (``pg_stat_database``, client + worker). Then, on the
  constant session's agent, where the CPU goes (``cpu_ms``): ``--asks`` asks alone and as
  many raw round trips alone, each with the CPU milliseconds per call of this client
  process, the worker (main process and pool children), PostgreSQL's backends of the
  bench database and the Redis server (server-wide).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import BenchEnv, emit, machine_info, setup_info, target
from bench.agents_app import Counter, LoopingMock
from hypha_celery.backends import BackendEvent, MockBackend

AGENTS = 100_000
START = 1_000
ASKS = 200
WARMUP = 20
PHASE_TURNS = 30
QUEUES = "hypha.agents,celery"
TABLES = ("hypha_agents", "hypha_events", "hypha_lanes", "hypha_lane_items",
          "hypha_agent_results", "hypha_agent_outbox")
TARGET_BYTES = 4096
TARGET_OVERHEAD_MS = 15.0
#: An ask's overhead (p50) at most this many raw Celery round trips (p50) (issue 27).
TARGET_RATIO = 3.0
#: Worker RSS growth from 0 to ``--agents`` idle agents that counts as "none" (noise of
#: a Python process serving the same turns; 100k agents x 50 B would be 5 MB).
TARGET_RSS_DELTA_MB = 5.0
NAME_WIDTH = 7


def _result(text: str = "ok") -> list[BackendEvent]:
    return [BackendEvent.new("result", {"text": text})]


def idle_name(i: int) -> str:
    return f"idle-{i:0{NAME_WIDTH}d}"


class AgentEnv(BenchEnv):
    """:class:`BenchEnv` whose worker consumes the agents' queue (and ``celery``)."""

    queues = QUEUES

    def __init__(self, pool: str = "prefork", concurrency: int = 2) -> None:
        super().__init__()
        self.pool, self.concurrency = pool, concurrency

    def __enter__(self) -> AgentEnv:
        super().__enter__()
        return self

    def _stop_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(30)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait(10)

    @property
    def hypha(self) -> Any:
        assert self.app is not None
        return self.app.hypha

    def setup(self) -> dict[str, Any]:
        info = setup_info(self)
        info["worker"] = (f"celery -A bench.app:celery worker -P {self.pool} "
                          f"-c {self.concurrency} -Q {QUEUES} -E --without-gossip "
                          "--without-mingle")
        info["lease_interval_s"] = self.hypha.settings.lease_interval
        return info


# -- statistics -------------------------------------------------------------------------
def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stats(xs: list[float], digits: int = 3) -> dict[str, Any]:
    return {"p50": round(statistics.median(xs), digits), "p95": round(pct(xs, 0.95), digits),
            "mean": round(statistics.fmean(xs), digits), "min": round(min(xs), digits),
            "max": round(max(xs), digits), "n": len(xs)}


def asks(h: Any, name: str, n: int) -> list[float]:
    """``n`` sequential asks; wall milliseconds of each."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        h.agents.ask(name, "ping", timeout=60)
        out.append((time.perf_counter() - t) * 1000.0)
    return out


# -- storage ----------------------------------------------------------------------------
def sizes(h: Any) -> dict[str, int]:
    with h.store.engine.connect() as conn:
        return {t: int(conn.exec_driver_sql(f"SELECT pg_total_relation_size('{t}')").scalar())
                for t in TABLES}


def vacuum(h: Any) -> None:
    with h.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for t in TABLES:
            conn.exec_driver_sql(f"VACUUM ANALYZE {t}")


def start_agents(h: Any, n: int) -> list[float]:
    """``hypha.agents.start`` one at a time; milliseconds of each."""
    out = []
    for i in range(n):
        t = time.perf_counter()
        h.agents.start(Counter, name=idle_name(i), backend=MockBackend, scripts=[_result()])
        out.append((time.perf_counter() - t) * 1000.0)
    return out


def _template(conn: Any) -> dict[str, Any]:
    """The row and event ``start`` wrote for ``idle_name(0)``, as text."""
    row = conn.execute(
        "SELECT name, incarnation, kind, phase, seq, control, heartbeat_at, doc::text, "
        "session->>'script_set', session::text FROM hypha_agents WHERE name = %s",
        (idle_name(0),)).fetchone()
    ev = conn.execute("SELECT kind, data::text, idem FROM hypha_events WHERE run_id = %s "
                      "ORDER BY seq", (row[1],)).fetchall()
    assert len(ev) == 1 and ev[0][0] == "agent.started", ev
    t = {"name": row[0], "incarnation": row[1], "kind": row[2], "phase": row[3],
         "seq": row[4], "control": row[5], "heartbeat_at": row[6], "doc": row[7],
         "script_set": row[8], "session": row[9], "event_kind": ev[0][0], "event_data": ev[0][1],
         "event_idem": ev[0][2]}
    assert t["phase"] == "idle" and t["seq"] == 1 and t["control"] is None, t
    for key, count in (("name", 1), ("incarnation", 1)):
        assert t["doc"].count(t[key]) == count, (key, t["doc"])
    assert t["session"].count(t["script_set"]) == 1, t["session"]
    assert t["event_data"].count(t["name"]) == 1, t["event_data"]
    return t


def bulk_load(h: Any, first: int, last: int) -> float:
    """COPY agents ``first..last-1`` shaped like the template; returns seconds."""
    t0 = time.perf_counter()
    raw = h.store.engine.raw_connection()
    try:
        conn = raw.driver_connection
        tpl = _template(conn)
        cur = conn.cursor()
        for lo in range(first, last, 10_000):
            hi = min(last, lo + 10_000)
            batch = []
            for i in range(lo, hi):
                name, inc, sset = idle_name(i), uuid.uuid4().hex, uuid.uuid4().hex
                doc = tpl["doc"].replace(tpl["name"], name).replace(tpl["incarnation"], inc)
                session = tpl["session"].replace(tpl["script_set"], sset)
                batch.append((name, inc, doc, session,
                              tpl["event_data"].replace(tpl["name"], name), time.time()))
            with cur.copy("COPY hypha_agents (name, incarnation, kind, phase, seq, control, "
                          "heartbeat_at, created_at, updated_at, doc, session) FROM STDIN") as cp:
                for name, inc, doc, session, _, now in batch:
                    cp.write_row((name, inc, tpl["kind"], tpl["phase"], tpl["seq"], None, None,
                                  now, now, doc, session))
            with cur.copy("COPY hypha_events (run_id, seq, kind, ts, data, idem) "
                          "FROM STDIN") as cp:
                for _, inc, _, _, data, now in batch:
                    cp.write_row((inc, 1, tpl["event_kind"], now, data, tpl["event_idem"]))
        raw.commit()
    finally:
        raw.close()
    return time.perf_counter() - t0


def shape_check(h: Any, started: int) -> dict[str, Any]:
    """Average stored sizes of the start()ed rows against the bulk-loaded ones."""
    size = "octet_length(a.doc::text) + octet_length(a.session::text)"
    q = (f"SELECT count(*), avg(pg_column_size(a.*)), avg({size}), "
         "avg(pg_column_size(e.*)), avg(octet_length(e.data::text)), "
         f"min({size}), max({size}) FROM hypha_agents a "
         "JOIN hypha_events e ON e.run_id = a.incarnation WHERE a.name LIKE 'idle-%%' AND "
         "(a.name < %(cut)s) = %(low)s")
    out: dict[str, Any] = {}
    with h.store.engine.connect() as conn:
        for label, low in (("via_start", True), ("bulk_copy", False)):
            r = conn.exec_driver_sql(q, {"cut": idle_name(started), "low": low}).one()
            out[label] = {"agents": int(r[0]), "agent_row_bytes": _f(r[1]),
                          "doc_json_bytes": _f(r[2]), "doc_json_bytes_min_max": [r[5], r[6]],
                          "event_row_bytes": _f(r[3]),
                          "event_data_bytes": _f(r[4])}
        out["lanes_rows"] = int(conn.exec_driver_sql(
            "SELECT count(*) FROM hypha_lanes").scalar())
    return out


def _f(x: Any) -> float | None:
    return None if x is None else round(float(x), 1)


# -- worker memory ----------------------------------------------------------------------
def rss(env: AgentEnv) -> dict[str, Any]:
    mem = env.worker_memory()
    return {k: mem[k] for k in ("main_rss_mb", "children_rss_mb", "total_rss_mb",
                                "total_uss_mb", "children_pids")}


def stale_query_ms(h: Any) -> dict[str, Any]:
    """The agents' part of a supervisor sweep (busy agents without a heartbeat), timed."""
    from hypha_celery.agents import rows

    out = []
    for _ in range(10):
        t = time.perf_counter()
        rows.stale(h.store, time.time(), 200)
        out.append((time.perf_counter() - t) * 1000.0)
    return stats(out)


# -- the measurements -------------------------------------------------------------------
def bench_idle(env: AgentEnv, agents: int, start: int) -> dict[str, Any]:
    h = env.hypha
    start = min(start, agents)
    h.agents.start(Counter, name="hot", backend=MockBackend,
                   scripts=[_result() for _ in range(3 * PHASE_TURNS + 5)])
    asks(h, "hot", PHASE_TURNS)  # warm-up: both pool processes import and connect
    mem_warm = rss(env)
    before_turns = stats(asks(h, "hot", PHASE_TURNS))
    mem_zero = rss(env)
    vacuum(h)
    before = sizes(h)
    t0 = time.perf_counter()
    start_ms = start_agents(h, start)
    start_s = time.perf_counter() - t0
    copy_s = bulk_load(h, start, agents) if agents > start else 0.0
    after_raw = sizes(h)
    vacuum(h)
    after = sizes(h)
    shape = shape_check(h, start)
    per_raw = {t: (after_raw[t] - before[t]) / agents for t in TABLES}
    per_vac = {t: (after[t] - before[t]) / agents for t in TABLES}
    total_raw, total_vac = sum(per_raw.values()), sum(per_vac.values())
    after_turns = stats(asks(h, "hot", PHASE_TURNS))
    mem_full = rss(env)
    stale = stale_query_ms(h)
    last = idle_name(agents - 1)
    probe = h.agents.ask(last, "are you there?", timeout=60).text
    status = h.agents.status(last)
    delta = mem_full["total_rss_mb"] - mem_zero["total_rss_mb"]
    drift = mem_zero["total_rss_mb"] - mem_warm["total_rss_mb"]
    same_pool = mem_full["children_pids"] == mem_zero["children_pids"] == \
        mem_warm["children_pids"]
    bytes_per_agent = max(total_raw, total_vac)
    return {
        "bench": "agents_idle", "agents": agents,
        "created_via_start": start, "created_via_copy": agents - start,
        "start_ms": stats(start_ms), "start_agents_per_s": round(start / start_s, 1),
        "copy_agents_per_s": round((agents - start) / copy_s, 1) if copy_s else None,
        "bytes_per_agent": round(bytes_per_agent, 1),
        "bytes_per_agent_after_load": round(total_raw, 1),
        "bytes_per_agent_after_vacuum": round(total_vac, 1),
        "bytes_per_agent_by_table_after_vacuum": {t: round(v, 1) for t, v in per_vac.items()},
        "table_bytes_before": before, "table_bytes_after_load": after_raw,
        "table_bytes_after_vacuum": after, "row_shapes": shape,
        "worker_rss_mb": {"after_warmup": mem_warm["total_rss_mb"],
                          "zero_idle_agents": mem_zero["total_rss_mb"],
                          f"{agents}_idle_agents": mem_full["total_rss_mb"],
                          "delta_mb": round(delta, 2),
                          "delta_bytes_per_idle_agent": round(delta * 1048576 / agents, 2),
                          "drift_of_turns_alone_mb": round(drift, 2)},
        "worker_uss_mb": {"zero_idle_agents": mem_zero["total_uss_mb"],
                          f"{agents}_idle_agents": mem_full["total_uss_mb"]},
        "worker_memory_detail": {"after_warmup": mem_warm, "zero_idle_agents": mem_zero,
                                 "many_idle_agents": mem_full},
        "pool_processes_unchanged": same_pool,
        "hot_agent_ask_ms": {"zero_idle_agents": before_turns, "many_idle_agents": after_turns},
        "agents_stale_query_ms": stale,
        "bulk_agent_probe": {"name": last, "answer": probe, "turns": status.agent_state["turns"]},
        "targets": [target("agents_storage_bytes_per_idle_agent", bytes_per_agent, "<=",
                           TARGET_BYTES),
                    target("agents_worker_rss_delta_mb", delta, "<=", TARGET_RSS_DELTA_MB)],
    }


def _pg_xacts(h: Any) -> int:
    """Committed + rolled back transactions of this database (all backends), once the
    backends flushed their statistics (idle backends do so within 10 s)."""
    time.sleep(11)
    with h.store.engine.connect() as conn:
        return int(conn.exec_driver_sql(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()").scalar())


def _breakdown(h: Any, incarnation: str, spans: list[tuple[float, float]]) -> dict[str, Any]:
    """Per ask: client send -> turn.started -> turn.completed -> ask returned (ms)."""
    with h.store.engine.connect() as conn:
        evs = conn.exec_driver_sql(
            "SELECT kind, ts FROM hypha_events WHERE run_id = %(r)s AND kind IN "
            "('agent.turn.started', 'agent.turn.completed') ORDER BY seq",
            {"r": incarnation}).all()
    started = [ts for kind, ts in evs if kind == "agent.turn.started"][-len(spans):]
    done = [ts for kind, ts in evs if kind == "agent.turn.completed"][-len(spans):]
    if len(started) != len(spans) or len(done) != len(spans):
        return {"error": "turn events do not match the asks"}
    return {"send_to_turn_started_ms": stats([(s - a) * 1e3 for (a, _), s in
                                              zip(spans, started, strict=True)]),
            "turn_started_to_completed_ms": stats([(d - s) * 1e3 for s, d in
                                                   zip(started, done, strict=True)]),
            "turn_completed_to_ask_returned_ms": stats([(b - d) * 1e3 for (_, b), d in
                                                        zip(spans, done, strict=True)])}


class Series:
    """The timed asks to one agent: wall and backend time, client send and return times."""

    def __init__(self, h: Any, name: str, incarnation: str) -> None:
        self.h, self.name, self.incarnation = h, name, incarnation
        self.reset()

    def reset(self) -> None:
        self.wall: list[float] = []
        self.backend: list[float] = []
        self.spans: list[tuple[float, float]] = []
        self.doc_bytes: list[int] = []

    def ask(self) -> None:
        a, t = time.time(), time.perf_counter()
        resp = self.h.agents.ask(self.name, "ping", timeout=60)
        self.wall.append((time.perf_counter() - t) * 1000.0)
        self.spans.append((a, time.time()))
        self.backend.append(resp.duration_ms)

    @property
    def overhead(self) -> list[float]:
        return [w - b for w, b in zip(self.wall, self.backend, strict=True)]

    def report(self) -> dict[str, Any]:
        over = self.overhead
        quarter = max(1, len(over) // 4)
        by_quarter = [{"asks": f"{i + 1}-{min(i + quarter, len(over))}",
                       "doc_bytes_before": self.doc_bytes[k] if k < len(self.doc_bytes) else None,
                       "overhead_p50_ms": round(statistics.median(over[i:i + quarter]), 3)}
                      for k, i in enumerate(range(0, len(over), quarter))]
        return {"overhead_ms": stats(over), "ask_wall_ms": stats(self.wall),
                "backend_duration_ms": stats(self.backend),
                "asks_over_100ms": sum(1 for x in over if x > 100),
                "by_quarter": by_quarter,
                "breakdown": _breakdown(self.h, self.incarnation, self.spans),
                "overhead_samples_ms": [round(x, 2) for x in over]}


def _phase(env: AgentEnv, series: Series, n: int, count_xacts: bool) -> dict[str, Any]:
    """Warm-up, then ``n`` asks to one agent interleaved with ``n`` raw round trips."""
    h, add = env.hypha, env.app.add  # type: ignore[union-attr]
    for _ in range(WARMUP):
        series.ask()
        add.delay(1, 1).get(timeout=30)
    series.reset()
    raw: list[float] = []
    quarter = max(1, n // 4)
    x0 = _pg_xacts(h) if count_xacts else 0
    for i in range(n):
        if i % quarter == 0:
            series.doc_bytes.append(_doc_bytes(h, series.name))
        series.ask()
        t = time.perf_counter()
        assert add.delay(1, 1).get(timeout=30) == 2
        raw.append((time.perf_counter() - t) * 1000.0)
    out = series.report()
    over, base = out["overhead_ms"], stats(raw)
    out.update(raw_celery_round_trip_ms=base,
               ratio_overhead_p50_to_raw_p50=round(over["p50"] / base["p50"], 2),
               ratio_overhead_p95_to_raw_p95=round(over["p95"] / base["p95"], 2),
               doc_bytes_at_end=_doc_bytes(h, series.name),
               raw_samples_ms=[round(x, 2) for x in raw])
    if count_xacts:  # the constant session's phase: its agent can take more asks
        out["pg_transactions_per_ask"] = round((_pg_xacts(h) - x0) / n, 1)
        out["cpu_ms"] = {"per_ask": _cpu(env, series.ask, n), "per_raw_round_trip": _cpu(
            env, lambda: add.delay(1, 1).get(timeout=30), n)}
    return out


def _cpu(env: AgentEnv, call: Any, n: int) -> dict[str, float]:
    """CPU milliseconds per ``call()`` (``n`` of them, nothing else between): this client
    process, the worker (main process and pool children), PostgreSQL's backends of the
    bench database and the Redis server (server-wide)."""
    import psutil

    from bench.agents_io import ServiceCpu

    assert env.worker is not None
    worker = psutil.Process(env.worker.pid)

    def worker_cpu() -> float:
        procs = [worker, *worker.children(recursive=True)]
        return sum(t.user + t.system for t in (p.cpu_times() for p in procs))

    services = ServiceCpu(env.hypha)
    services.start()
    w0, c0 = worker_cpu(), time.process_time()
    for _ in range(n):
        call()
    client, work = time.process_time() - c0, worker_cpu() - w0
    found = services.stop(n)
    out = {"client": round(client * 1000 / n, 3), "worker": round(work * 1000 / n, 3),
           "postgresql": found["postgresql_cpu_ms_per_turn"],
           "redis_server_wide": found["redis_cpu_ms_per_turn_server_wide"]}
    out["total"] = round(sum(out.values()), 3)
    return out


def bench_turn(env: AgentEnv, n: int) -> dict[str, Any]:
    """Two phases, one agent each, ``n`` asks interleaved with raw round trips: a session
    of constant size first, then plain MockBackend with all ``n`` scripts given at start."""
    h = env.hypha
    loop = h.agents.start(Counter, name="turns-constant", backend=LoopingMock,
                          scripts=[_result()])
    constant = _phase(env, Series(h, "turns-constant", loop.incarnation), n, True)
    plain = h.agents.start(Counter, name="turns", backend=MockBackend,
                           scripts=[_result() for _ in range(WARMUP + n)])
    mock = _phase(env, Series(h, "turns", plain.incarnation), n, False)
    over, base = mock["overhead_ms"], mock["raw_celery_round_trip_ms"]
    return {
        "bench": "agents_turn", "asks": n, "warmup": WARMUP,
        "overhead_ms": over, "raw_celery_round_trip_ms": base,
        "ratio_overhead_p50_to_raw_p50": mock["ratio_overhead_p50_to_raw_p50"],
        "ratio_overhead_p95_to_raw_p95": mock["ratio_overhead_p95_to_raw_p95"],
        "constant_session_overhead_ms": constant["overhead_ms"],
        "constant_session_raw_celery_round_trip_ms": constant["raw_celery_round_trip_ms"],
        "constant_session_ratio_p50": constant["ratio_overhead_p50_to_raw_p50"],
        "pg_transactions_per_ask": constant["pg_transactions_per_ask"],
        "cpu_ms_constant_session": constant["cpu_ms"],
        "mock": {"backend": "MockBackend: one scripted `result` event per turn, all "
                            f"{WARMUP + n} scripts given at start (the stored doc shrinks "
                            "as they are consumed)", **mock},
        "constant_session": {"backend": "bench.agents_app:LoopingMock: MockBackend "
                                        "replaying one script (the stored doc stays small)",
                             **constant},
        "targets": [target("agents_turn_overhead_p50_over_raw_round_trip_p50",
                           mock["ratio_overhead_p50_to_raw_p50"], "<=", TARGET_RATIO),
                    target("agents_turn_overhead_p50_ms", over["p50"], "<=",
                           TARGET_OVERHEAD_MS),
                    target("agents_turn_overhead_p50_ms_constant_session",
                           constant["overhead_ms"]["p50"], "<=", TARGET_OVERHEAD_MS)],
    }


def _doc_bytes(h: Any, name: str) -> int:
    with h.store.engine.connect() as conn:
        return int(conn.exec_driver_sql(
            "SELECT octet_length(doc::text) + octet_length(session::text) FROM hypha_agents "
            "WHERE name = %(n)s", {"n": name}).scalar())


# -- running ----------------------------------------------------------------------------
def run(name: str, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    with AgentEnv(args.pool, args.concurrency) as env:
        doc: dict[str, Any] = {"machine": machine_info(), "setup": env.setup()}
        if name == "idle":
            doc[name] = bench_idle(env, args.agents, args.start)
        else:
            doc[name] = bench_turn(env, args.asks)
        doc["setup"]["foreign_messages_in_worker_log"] = env.foreign_messages()
    doc["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["targets"] = doc[name].pop("targets")
    doc["all_pass"] = all(t["pass"] for t in doc["targets"])
    doc["duration_s"] = round(time.monotonic() - t0, 1)
    emit(f"agents_{name}", doc)
    return doc


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("which", nargs="?", default="all", choices=("idle", "turn", "all"))
    p.add_argument("--agents", type=int, default=AGENTS, help="idle agents (default 100000)")
    p.add_argument("--start", type=int, default=START,
                   help="of which created through hypha.agents.start (default 1000)")
    p.add_argument("--asks", type=int, default=ASKS, help="timed asks (default 200)")
    p.add_argument("--pool", default="prefork", choices=("prefork", "threads"))
    p.add_argument("--concurrency", type=int, default=2)
    args = p.parse_args(argv)
    if args.agents < 1 or args.start < 1 or args.asks < 1:
        p.error("--agents, --start and --asks must be >= 1")
    if args.which != "all":
        return 0 if run(args.which, args)["all_pass"] else 1
    # one interpreter per measurement: bench.app binds its store URL when it is imported
    rest = [a for a in argv if a not in ("all", "idle", "turn")]
    codes = [subprocess.run([sys.executable, __file__, name, *rest], check=False).returncode
             for name in ("idle", "turn")]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
