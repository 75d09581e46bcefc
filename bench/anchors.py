"""Anchors: bench ``linear``'s and ``fanout``'s workloads run by LangGraph and DBOS Transact,
interleaved with hypha and raw Celery in the same rounds.

``linear`` (20 no-op steps in a row, ms per step) and ``fanout`` (100 parallel no-op
branches merged, ms per run), each by:

* hypha: ``bench_linear20`` / ``bench_fanout100`` through the bench worker, timed as in
  ``bench/linear.py`` and ``bench/fanout.py`` (``start`` then ``run.wait()``);
* raw Celery: ``chain(add.s(0), add.s() x19)`` (results stored, Celery's default) /
  ``chord([one.s()] * 100, tsum.s())``, as in those benches;
* LangGraph in this process (``bench/anchor_langgraph.py``): no checkpointer,
  ``InMemorySaver``, ``SqliteSaver`` on a temporary file, ``PostgresSaver`` on a private
  database of the bench's PostgreSQL server (checkpoint written before the next step:
  ``durability="sync"``), and ``PostgresSaver`` with LangGraph's default
  ``durability="async"``;
* DBOS Transact in this process (``bench/anchor_dbos.py``): a workflow of 20 steps / a
  workflow starting 100 child workflows of one step, its system database a private
  database of the same PostgreSQL server.

Every system runs once per round, the order rotating from round to round, after a
warm-up, so load drift hits all alike. ``hypha_over_anchor`` is hypha's median over the
anchor's median (above 1: hypha takes that many times as long); ``hypha_over_anchor_paired``
the median of the rounds' own ratios. The anchors run in one process with no broker hop;
hypha and raw Celery go through the broker and a worker. No target: the ratios are context.

    python -m bench.anchors            # its own environment (~1 min)
    python bench/run_all.py --report linear fanout anchors
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import sqlalchemy as sa
from celery import chain, chord

from bench._harness import (
    PG_ADMIN_URL,
    BenchEnv,
    pg_server_version,
    standalone,
    summary,
    timed_run,
)

STEPS = 20
WIDTH = 100
LINEAR_WARMUP = 3
LINEAR_REPEATS = 30
FANOUT_WARMUP = 2
FANOUT_REPEATS = 9

Sampler = Callable[[], float]

LABELS = {
    "hypha": "hypha (Celery worker, PostgreSQL store)",
    "raw_celery": "raw Celery (chain / chord, results stored)",
    "langgraph_memory": "LangGraph, no checkpointer",
    "langgraph_inmemorysaver": "LangGraph, InMemorySaver",
    "langgraph_sqlite": "LangGraph, SqliteSaver (temp file)",
    "langgraph_postgres": "LangGraph, PostgresSaver",
    "langgraph_postgres_async": "LangGraph, PostgresSaver, durability=async",
    "dbos": "DBOS Transact (PostgreSQL)",
}


def bench(env: BenchEnv) -> dict[str, Any]:
    with ExitStack() as stack:
        linear, fanout = _samplers(env, stack)
        lin = _rounds(linear, LINEAR_WARMUP, LINEAR_REPEATS)
        fan = _rounds(fanout, FANOUT_WARMUP, FANOUT_REPEATS)
    from bench import anchor_dbos, anchor_langgraph

    out: dict[str, Any] = {
        "steps": STEPS, "width": WIDTH,
        "linear_repeats": LINEAR_REPEATS, "fanout_repeats": FANOUT_REPEATS,
        "versions": {**anchor_langgraph.versions(), **anchor_dbos.versions()},
        "postgresql_server": pg_server_version(),
        "linear_ms_per_step": _compare(lin, 1000 / STEPS, 3),
        "fanout_ms_per_run": _compare(fan, 1000, 1),
        "notes": "hypha_over_anchor = hypha's median over the system's median (above 1: "
                 "hypha takes that many times as long); _paired: the median of the rounds' "
                 "ratios. LangGraph and DBOS run in the bench's process, without a broker; "
                 "checkpointers write before the next step (durability=sync) except "
                 "langgraph_postgres_async (LangGraph's default).",
        "targets": [],
    }
    out["context_ratios"] = _context_ratios(out)
    return out


def _samplers(env: BenchEnv, stack: ExitStack) -> tuple[dict[str, Sampler], dict[str, Sampler]]:
    """The linear and fanout samplers of every system; their resources on ``stack``."""
    from bench import anchor_langgraph as lg

    app = env.app
    assert app is not None
    run_ids: list[str] = []
    linear: dict[str, Sampler] = {
        "hypha": timed_run(app.hypha, "bench_linear20", {"steps": STEPS}, run_ids, 60),
        "raw_celery": lambda: _raw_chain(app)}
    fanout: dict[str, Sampler] = {
        "hypha": timed_run(app.hypha, "bench_fanout100", {"ok": WIDTH}, run_ids, 120),
        "raw_celery": lambda: _raw_chord(app)}
    lg_url = stack.enter_context(_private_database("hypha_bench_lg_"))
    for variant in lg.variants(stack, lg_url):
        key = f"langgraph_{variant.name}"
        linear[key] = variant.sampler(lg.linear_builder(), {"n": 0}, lg.linear_check)
        fanout[key] = variant.sampler(lg.fanout_builder(), {}, lg.fanout_check)
    dbos_url = stack.enter_context(_private_database("hypha_bench_dbos_"))
    from bench import anchor_dbos

    stack.enter_context(anchor_dbos.launched(dbos_url))
    linear["dbos"] = anchor_dbos.linear_sampler()
    fanout["dbos"] = anchor_dbos.fanout_sampler()
    return linear, fanout


@contextmanager
def _private_database(prefix: str) -> Iterator[str]:
    """A new database on the bench's PostgreSQL server as a libpq URL; dropped after."""
    from hypha_celery.store import scratch_database

    with scratch_database(PG_ADMIN_URL, prefix=prefix) as url:
        yield sa.make_url(url).set(drivername="postgresql").render_as_string(
            hide_password=False)


def _raw_chain(app: Any) -> float:
    hops = [app.add.s(0)] + [app.add.s() for _ in range(STEPS - 1)]
    t0 = time.perf_counter()
    result = chain(*hops).apply_async().get(timeout=60)
    dt = time.perf_counter() - t0
    if result != STEPS:
        raise RuntimeError(f"raw chain returned {result!r}")
    return dt


def _raw_chord(app: Any) -> float:
    t0 = time.perf_counter()
    value = chord([app.one.s() for _ in range(WIDTH)], app.tsum.s()).apply_async().get(
        timeout=120)
    dt = time.perf_counter() - t0
    if value != WIDTH:
        raise RuntimeError(f"raw chord returned {value!r}")
    return dt


def _rounds(samplers: dict[str, Sampler], warmup: int, repeats: int) -> dict[str, list[float]]:
    """``warmup`` + ``repeats`` rounds, every sampler once a round; round ``r`` starts at
    the ``r``-th sampler (rotating), so no system always runs right after another."""
    names = list(samplers)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + repeats):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            dt = samplers[name]()
            if r >= warmup:
                out[name].append(dt)
    return out


def _compare(samples: dict[str, list[float]], scale: float, digits: int) -> dict[str, Any]:
    """Each system's summary (``scale``: to ms per step or per run) and hypha's ratio."""
    hypha = samples["hypha"]
    h_median = statistics.median(hypha)
    out: dict[str, Any] = {}
    for name, xs in samples.items():
        entry: dict[str, Any] = {"label": LABELS.get(name, name), **summary(xs, scale, digits)}
        entry["hypha_over_anchor"] = round(h_median / statistics.median(xs), 3)
        entry["hypha_over_anchor_paired"] = round(
            statistics.median(h / x for h, x in zip(hypha, xs, strict=True)), 3)
        out[name] = entry
    return out


def _context_ratios(out: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for workload, unit in (("linear_ms_per_step", "ms/step"), ("fanout_ms_per_run", "ms/run")):
        hypha = out[workload]["hypha"]["median"]
        for name, entry in out[workload].items():
            if name != "hypha":
                rows.append({"name": f"{workload.split('_')[0]}: hypha ÷ {entry['label']}",
                             "value": entry["hypha_over_anchor"],
                             "detail": f"{hypha} vs {entry['median']} {unit}"})
    return rows


# -- docs/performance.md ---------------------------------------------------------


def report_section(result: dict[str, Any]) -> str:
    """Markdown for ``bench/report.py``: both workloads, every system, hypha's ratios."""
    versions = ", ".join(f"{k} {v}" for k, v in result.get("versions", {}).items() if v)
    parts = [
        "The same workloads as `linear` and `fanout`, run by LangGraph and DBOS Transact in "
        "the bench's own process and by hypha and raw Celery through the bench worker, "
        "every system once a round (the order rotating), "
        f"{result.get('linear_repeats')} rounds of `linear` and "
        f"{result.get('fanout_repeats')} of `fanout` after a warm-up. "
        "**hypha ÷ system** is hypha's median over the system's: above 1, hypha takes "
        "that many times as long; *paired* is the median of the rounds' own ratios. "
        "hypha's figures are its own rounds here (the graphs and timing of `linear` and "
        "`fanout`, so the anchors share its load), not `linear`'s section.",
        "",
        "- hypha: `start` → `run.wait()` through the broker, the worker (2 processes) and "
        "the PostgreSQL store; consecutive fast nodes run as local steps in one task within "
        "the local steps budget (`setup.local_steps_budget_s`; see `linear` in "
        "bench/README.md).",
        "- LangGraph: `invoke` in the bench's process; `linear` is 20 nodes joined by static "
        "edges, `fanout` 100 `Send`s to one node and a merge node. Checkpointers write each "
        "step before the next (`durability=\"sync\"`, hypha's and DBOS's guarantee), "
        "except in the async row (LangGraph's default); each invoke is a new `thread_id`.",
        "- DBOS: a workflow called in the bench's process; `linear` is 20 `@DBOS.step()`s, "
        "`fanout` 100 child workflows of one step started with `DBOS.start_workflow` and "
        "awaited; its system database is a private database of the bench's PostgreSQL "
        "server.",
        "",
        f"Versions: {versions}; PostgreSQL {result.get('postgresql_server')}.",
    ]
    for key, title, unit in (
            ("linear_ms_per_step", f"linear: {result.get('steps')} no-op steps in a row",
             "ms/step"),
            ("fanout_ms_per_run", f"fanout: {result.get('width')} parallel no-op branches "
                                  "merged", "ms/run")):
        parts += ["", f"**{title}** ({unit})", "", _table(result.get(key, {}), unit)]
    return "\n".join(parts)


def _table(entries: dict[str, Any], unit: str) -> str:
    lines = [f"| system | median {unit} | min | max | hypha ÷ system | paired |",
             "|---|---:|---:|---:|---:|---:|"]
    for entry in entries.values():
        lines.append(f"| {entry['label']} | {entry['median']} | {entry['min']} | "
                     f"{entry['max']} | {entry['hypha_over_anchor']} | "
                     f"{entry['hypha_over_anchor_paired']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    standalone("anchors", bench)
