"""Fan-out: hypha 100 edges + reducer vs raw ``chord([one.s()] * 100, tsum.s())``.

hypha: the whole run, ``hypha.start("bench_fanout100")`` -> ``run.wait()``: the start
transaction, the kickoff coordinator (policy -> FanOut), 100 edge tasks (each records its
outcome), the reducer (chord callback), the coordinator that finishes, the wake-up.
raw:   ``chord(header, tsum.s()).apply_async().get()``.

From the event timestamps we also derive the fan-out step alone: ``node.fanout.scheduled``
(in the kickoff coordinator, before its commit and the chord publish) to
``node.reducer.completed`` (recorded by the coordinator step that runs after the reducer).

    python -m bench.fanout
"""

from __future__ import annotations

import time
from typing import Any

from celery import chord

from bench._harness import BenchEnv, interleaved, standalone, summary, target, timed_run

WIDTH = 100
WARMUP = 2
REPEATS = 9
TARGET = 1.1  # issue 27: a fan-out of 100 at most 1.1 x a raw chord


def bench(env: BenchEnv) -> dict[str, Any]:
    app = env.app
    assert app is not None
    hypha = app.hypha
    run_ids: list[str] = []

    hypha_run = timed_run(hypha, "bench_fanout100", {"ok": WIDTH}, run_ids, timeout=120)

    def raw_chord() -> float:
        t0 = time.perf_counter()
        result = chord([app.one.s() for _ in range(WIDTH)], app.tsum.s()).apply_async()
        value = result.get(timeout=120)
        dt = time.perf_counter() - t0
        assert value == WIDTH, value
        return dt

    interleaved(WARMUP, hypha_run, raw_chord)
    run_ids.clear()
    h, r = interleaved(REPEATS, hypha_run, raw_chord)
    phases = [_phases(hypha, rid) for rid in run_ids]
    hs, rs = summary(h, 1000, 1), summary(r, 1000, 1)
    step = summary([p["fanout_step"] for p in phases], 1000, 1)
    ratio = hs["median"] / rs["median"]
    return {
        "width": WIDTH, "repeats": REPEATS, "warmup": WARMUP,
        "hypha_wall_ms": hs,
        "raw_chord_wall_ms": rs,
        "hypha_fanout_step_ms": step,
        "hypha_edges_done_ms": summary([p["edges_done"] for p in phases], 1000, 1),
        "hypha_run_events_ms": summary([p["run"] for p in phases], 1000, 1),
        "ratio": round(ratio, 3),
        "ratio_min": round(hs["min"] / rs["min"], 3),
        "ratio_fanout_step_only": round(step["median"] / rs["median"], 3),
        "notes": "ratio = median hypha whole-run wall time over median raw chord wall time. "
                 "hypha_fanout_step_ms: node.fanout.scheduled -> node.reducer.completed event "
                 "timestamps; hypha_edges_done_ms: node.fanout.scheduled -> last edge "
                 "node.execution.completed; "
                 "hypha_run_events_ms: run.created -> run.completed.",
        "targets": [target("fanout_ratio", ratio, "<=", TARGET)],
    }


def _phases(hypha: Any, run_id: str) -> dict[str, float]:
    evs = hypha.store.events(run_id)
    ts = {e.kind: e.ts for e in evs}  # last occurrence of each kind
    scheduled = ts["node.fanout.scheduled"]
    last_edge = max(e.ts for e in evs if e.kind == "node.execution.completed")
    return {"fanout_step": ts["node.reducer.completed"] - scheduled,
            "edges_done": last_edge - scheduled,
            "run": ts["run.completed"] - ts["run.created"]}


if __name__ == "__main__":
    standalone("fanout", bench)
