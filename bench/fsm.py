"""What running a workflow as an FSM adds to a coordinator step (:mod:`hypha_celery.fsm`).

* **decision** (pure, in this process): the :class:`WorkflowPolicy` call for a mid-run
  step of a ``STATES``-state chain — choose the transition (a 2-clause guard), check it,
  record ``fsm.transition.accepted`` + ``fsm.state.entered``, return ``Next`` — against a
  hand-written policy that returns the same ``Next``; ``DECISIONS`` calls each, median µs.
* **step** (the target): whole runs on the embedded runtime (in-process worker, the real
  store: SQLite file and PostgreSQL), a ``STATES``-step workflow against the same
  nodes under a plain policy, ``RUNS`` runs each, interleaved in pairs; the median of
  the paired differences divided by the steps is what the FSM adds to one coordinator
  step (its policy call plus its two extra events in the step's transaction). The
  difference of the two medians is printed beside it.

    python -m bench.fsm
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import sqlalchemy as sa

from bench._harness import PG_ADMIN_URL, run_bench, target
from hypha_celery import Context, Finish, Graph, Hypha, Next, Outcome, Settings
from hypha_celery.fsm import Fsm, WorkflowPolicy, WorkflowSpec, workflow_graph

STATES = 20
DECISIONS = int(os.environ.get("BENCH_FSM_DECISIONS", "20000"))
RUNS = int(os.environ.get("BENCH_FSM_RUNS", "25"))
GUARD = "variables.count >= 0 && exists(input.question)"
TARGETS = {"fsm_adds_per_step_ms": ("<=", 1.0)}


def _spec() -> WorkflowSpec:
    names = [f"S{i}" for i in range(STATES)]
    return WorkflowSpec.model_validate({
        "id": "bench_fsm", "initial_state": "S0", "terminal_states": ["Done"],
        "states": [*({"id": n, "node": "work"} for n in names), {"id": "Done"}],
        "transitions": [{"from": a, "to": b, "guard": GUARD}
                        for a, b in zip(names, [*names[1:], "Done"], strict=True)]})


def work(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {"count": int(state.get("count", 0)) + 1}


def _plain(ctx: Context) -> Next | Finish:
    return Next("work", ctx.input) if ctx.step < STATES else Finish(ctx.state)


def _decision_us(fsm: Fsm) -> dict[str, float]:
    policy = WorkflowPolicy(fsm)
    step = STATES // 2
    snap = {"workflow": fsm.id, "state": f"S{step - 1}", "path": [], "step": step - 1}
    last = Outcome(node_id="work", ok=True, value={"count": step}, execution_id="r.1")
    out: dict[str, float] = {}
    for name, fn, fsm_snap in (("fsm", policy, snap), ("plain", _plain, None)):
        samples = []
        for _ in range(DECISIONS):
            ctx = Context(run_id="r", graph_id="bench_fsm", step=step, state={"count": step},
                          input={"question": "q"}, last=last, fsm=fsm_snap)
            t0 = time.perf_counter_ns()
            fn(ctx)
            samples.append(time.perf_counter_ns() - t0)
        out[f"{name}_median_us"] = round(statistics.median(samples) / 1000, 2)
    out["fsm_adds_us"] = round(out["fsm_median_us"] - out["plain_median_us"], 2)
    return out


def _run_seconds(hypha: Hypha, graph_id: str) -> float:
    t0 = time.perf_counter()
    result = hypha.start(graph_id, {"question": "q"}).wait(60)
    took = time.perf_counter() - t0
    assert result in ({"count": STATES}, {"count": STATES}), result
    return took


def _steps(store_url: str, fsm: Fsm) -> dict[str, Any]:
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=store_url, embedded=True))
    try:
        hypha.register(workflow_graph(fsm, {"work": work}, max_steps=STATES + 5))
        hypha.register(Graph("bench_plain", {"work": work}, _plain, max_steps=STATES + 5,
                             on_node_error="policy"))
        for _ in range(2):  # warm up: schema, connections, imports
            _run_seconds(hypha, "bench_fsm")
            _run_seconds(hypha, "bench_plain")
        times: dict[str, list[float]] = {"bench_fsm": [], "bench_plain": []}
        for _ in range(RUNS):
            for graph_id in times:
                times[graph_id].append(_run_seconds(hypha, graph_id))
    finally:
        hypha.close()
    fsm_s, plain_s = (statistics.median(times[g]) for g in ("bench_fsm", "bench_plain"))
    paired = statistics.median(f - p for f, p in zip(times["bench_fsm"], times["bench_plain"],
                                                     strict=True))
    return {"runs": RUNS, "steps_per_run": STATES,
            "fsm_run_median_ms": round(fsm_s * 1000, 1),
            "plain_run_median_ms": round(plain_s * 1000, 1),
            "plain_step_ms": round(plain_s * 1000 / STATES, 3),
            "difference_of_medians_per_step_ms": round((fsm_s - plain_s) * 1000 / STATES, 3),
            "fsm_adds_per_step_ms": round(paired * 1000 / STATES, 3)}


def bench() -> dict[str, Any]:
    fsm = Fsm(_spec(), {"work": work})
    out: dict[str, Any] = {"states": STATES, "guard": GUARD, "decision": _decision_us(fsm)}
    with tempfile.TemporaryDirectory(prefix="hypha-bench-fsm-") as tmp:
        out["sqlite"] = _steps(f"sqlite:///{tmp}/fsm.db", fsm)
    db = f"hypha_bench_fsm_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{db}"')
        out["postgresql"] = _steps(f"{PG_ADMIN_URL.rpartition('/')[0]}/{db}", fsm)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.dispose()
    out["targets"] = [target(f"{b}_fsm_adds_per_step_ms", out[b]["fsm_adds_per_step_ms"],
                             *TARGETS["fsm_adds_per_step_ms"]) for b in ("sqlite", "postgresql")]
    return out


def main() -> int:
    return run_bench("fsm", bench)


if __name__ == "__main__":
    sys.exit(main())
