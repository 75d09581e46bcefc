"""Run every benchmark side by side in ONE environment and print one JSON document.

    .venv/bin/python bench/run_all.py            # or: python -m bench.run_all
    .venv/bin/python bench/run_all.py linear fanout   # a subset
    .venv/bin/python bench/run_all.py --report linear fanout throughput anchors

One Redis database, one fresh PostgreSQL database and one worker process tree serve
every measurement, hypha and raw Celery alike. Writes ``bench/results/run_all.json``
and ``bench/results/<name>.json`` per benchmark; with ``--report``, also
``docs/performance.md`` from this run's results (``bench/report.py``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench import anchors, fanout, linear, memory, observability, report, supervisor, throughput
from bench import console as console_bench
from bench._harness import (
    BenchEnv,
    emit,
    machine_info,
    pg_server_version,
    python_loop_ms,
    setup_info,
)

BENCHES = {"linear": linear.bench, "fanout": fanout.bench,
           "throughput": throughput.bench, "memory": memory.bench,
           "supervisor": supervisor.bench, "observability": observability.bench,
           "console": lambda env: console_bench.bench(),  # its own database, no worker
           "anchors": anchors.bench}  # LangGraph and DBOS beside hypha: the `bench` extra

#: Benches that start their own services (workers of other profiles, a private Redis):
#: run as their own process (its own Redis database and PostgreSQL database), their JSON
#: read back. ``run_all.py`` with no names runs these too.
SEPARATE = {"agents_turn": ("turn", ["bench/agents.py", "turn", "--asks", "200"]),
            "agents_io": ("agents_io", ["bench/agents_io.py"]),
            "graph_io": ("graph_io", ["bench/graph_io.py"]),
            "events": ("events", ["bench/events.py"]),
            "langgraph": ("langgraph", ["bench/langgraph.py"]),
            "scale": ("scale", ["bench/scale.py"])}
for _name, (_key, _argv) in SEPARATE.items():
    BENCHES[_name] = (lambda key, argv: lambda env: _separate(key, argv))(_key, _argv)


def _separate(key: str, argv: list[str]) -> dict[str, Any]:
    """``python <argv>`` with this run's Redis and PostgreSQL settings removed (it claims
    its own): the ``key`` part of the document it prints, with its targets."""
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items()
           if k not in ("BENCH_REDIS_URL", "BENCH_STORE_URL", "BENCH_REDIS_CLAIMED")}
    done = subprocess.run([sys.executable, *argv], cwd=root, env=env,
                          stdout=subprocess.PIPE, text=True)
    if "{" not in done.stdout:  # it broke (a bench exits 1 when a target fails, with
        # its document): the others still run, the report says this one failed
        print(f"[bench] {' '.join(argv)} failed (exit {done.returncode}): see its stderr "
              "above", file=sys.stderr)
        return {"failed": f"{' '.join(argv)} exited {done.returncode}", "targets": []}
    found: dict[str, Any] = json.loads(done.stdout[done.stdout.index("{"):])
    result: dict[str, Any] = dict(found[key])
    result["targets"] = found["targets"]
    return result


def main(argv: list[str]) -> int:
    write_report = "--report" in argv
    names = [a for a in argv if a != "--report"] or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHES)}",
              file=sys.stderr)
        return 2
    t0 = time.monotonic()
    doc: dict[str, Any] = {
        "started_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "benches": names, "machine": machine_info()}
    doc["machine"]["postgresql_server"] = pg_server_version()
    targets: list[dict[str, Any]] = []
    with BenchEnv() as env:
        doc["setup"] = setup_info(env)
        for name in names:
            t = time.monotonic()
            result = BENCHES[name](env)
            result["duration_s"] = round(time.monotonic() - t, 1)
            targets.extend(result["targets"])
            (env.log_path.parent / f"{name}.json").write_text(json.dumps(
                {"machine": doc["machine"], "setup": doc["setup"], name: result}, indent=2) + "\n")
            doc[name] = result
            print(f"[bench] {name}: {', '.join(_fmt(x) for x in result['targets'])} "
                  f"({result['duration_s']}s)", file=sys.stderr)
        doc["setup"]["foreign_messages_in_worker_log"] = foreign = env.foreign_messages()
    if foreign:
        print(f"[bench] WARNING: the worker received {foreign} message(s) for unknown tasks: "
              "another process uses this Redis database; do not trust these numbers",
              file=sys.stderr)
    doc["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["machine"]["python_loop_ms_at_end"] = python_loop_ms()
    doc["targets"] = targets
    doc["all_pass"] = all(t["pass"] for t in targets)
    doc["duration_s"] = round(time.monotonic() - t0, 1)
    emit("run_all", doc)
    if write_report:
        print(f"[bench] wrote {report.write(doc, names)}", file=sys.stderr)
    return 0


def _fmt(t: dict[str, Any]) -> str:
    return f"{t['name']}={t['value']} ({t['op']} {t['target']}: {'ok' if t['pass'] else 'FAIL'})"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
