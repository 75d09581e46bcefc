"""Run every benchmark side by side in ONE environment and print one JSON document.

    .venv/bin/python bench/run_all.py            # or: python -m bench.run_all
    .venv/bin/python bench/run_all.py linear fanout   # a subset

One Redis database, one fresh PostgreSQL database and one worker process tree serve
every measurement, hypha and raw Celery alike. Writes ``bench/results/run_all.json``
and ``bench/results/<name>.json`` per benchmark.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import console as console_bench
from bench import fanout, linear, memory, observability, supervisor, throughput
from bench._harness import BenchEnv, emit, machine_info, setup_info

BENCHES = {"linear": linear.bench, "fanout": fanout.bench,
           "throughput": throughput.bench, "memory": memory.bench,
           "supervisor": supervisor.bench, "observability": observability.bench,
           "console": lambda env: console_bench.bench()}  # its own database, no worker


def main(argv: list[str]) -> int:
    names = argv or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHES)}",
              file=sys.stderr)
        return 2
    t0 = time.monotonic()
    doc: dict[str, Any] = {"machine": machine_info()}
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
    doc["targets"] = targets
    doc["all_pass"] = all(t["pass"] for t in targets)
    doc["duration_s"] = round(time.monotonic() - t0, 1)
    emit("run_all", doc)
    return 0


def _fmt(t: dict[str, Any]) -> str:
    return f"{t['name']}={t['value']} ({t['op']} {t['target']}: {'ok' if t['pass'] else 'FAIL'})"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
