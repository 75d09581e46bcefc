"""Guard expressions: parse once, evaluate many (:mod:`hypha_celery.guards`).

No services: the parser and evaluator alone, in this process.

* **evaluate** (the target): a pre-parsed 5-clause guard (``FIVE``) on a small scope
  where every clause is true (so ``&&`` runs all five), ``EVALUATIONS`` (50,000) calls
  each timed with :func:`time.perf_counter_ns`; median and p95 in µs. The timer's own
  cost (an empty timed call) is reported beside it, not subtracted; ``mean_us`` is a
  whole loop over the count.
* **evaluate, one shot**: :func:`hypha_celery.guards.evaluate` (the LRU-cached parse,
  then evaluate), same guard and scope.
* **evaluate, one clause** (``variables.score == 3``), for scale.
* **parse**: ``PARSES`` (2,000) uncached :func:`parse` calls of ``FIVE`` (the regex
  comes from :mod:`re`'s own cache after the first), and of a 1,024-character guard.

    python -m bench.guards
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: ``bench`` importable, its files not (a
    # bench/langgraph.py would hide the langgraph package)
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import run_bench, target
from hypha_celery.guards import MAX_EXPRESSION_CHARS, evaluate, parse

EVALUATIONS = int(os.environ.get("BENCH_GUARDS_EVALUATIONS", "50000"))
PARSES = 2000
FIVE = ("input.ready == true && variables.score >= 3 && matches(metadata.intent, '^ship') "
        "&& exists(variables.owner) && !exists(variables.blocked)")
ONE = "variables.score == 3"
SCOPE = {"input": {"ready": True, "question": "ship the release?"},
         "variables": {"score": 5, "owner": "ana", "tags": ["release", "weekly"]},
         "metadata": {"intent": "ship it", "user": "u-1"}}
TARGETS = {"evaluate_five_clauses_median_us": ("<=", 20.0)}


def _long_guard() -> str:
    clause = "(variables.score >= 3 || input.ready == true) && "
    text = clause * (MAX_EXPRESSION_CHARS // len(clause))
    return (text + "x" * MAX_EXPRESSION_CHARS)[:MAX_EXPRESSION_CHARS]


def _timed(fn: Callable[[], object], count: int) -> dict[str, Any]:
    """Each of ``count`` calls timed alone: median, p95, min in µs; and the loop's mean."""
    samples = [0] * count
    clock = time.perf_counter_ns
    start = clock()
    for i in range(count):
        t0 = clock()
        fn()
        samples[i] = clock() - t0
    total = clock() - start
    samples.sort()
    return {"n": count, "median_us": round(statistics.median(samples) / 1000, 3),
            "p95_us": round(samples[int(count * 0.95)] / 1000, 3),
            "min_us": round(samples[0] / 1000, 3),
            "mean_us": round(total / count / 1000, 3)}


def bench() -> dict[str, Any]:
    five, one, long = parse(FIVE), parse(ONE), _long_guard()
    assert five.evaluate(SCOPE) is True and evaluate(FIVE, SCOPE) is True
    assert one.evaluate({"variables": {"score": 3}}) is True
    assert len(long) == MAX_EXPRESSION_CHARS and parse(long).evaluate(SCOPE) in (True, False)
    for _ in range(2000):  # warm up
        five.evaluate(SCOPE)
    out: dict[str, Any] = {"guard": FIVE, "scope": SCOPE}
    out["timer_overhead"] = _timed(lambda: None, EVALUATIONS)
    out["evaluate"] = _timed(lambda: five.evaluate(SCOPE), EVALUATIONS)
    out["evaluate_one_shot"] = _timed(lambda: evaluate(FIVE, SCOPE), EVALUATIONS)
    out["evaluate_one_clause"] = _timed(lambda: one.evaluate(SCOPE), EVALUATIONS)
    out["parse"] = _timed(lambda: parse(FIVE), PARSES)
    out["parse_1024_chars"] = _timed(lambda: parse(long), PARSES)
    out["targets"] = [target("evaluate_five_clauses_median_us",
                             out["evaluate"]["median_us"],
                             *TARGETS["evaluate_five_clauses_median_us"])]
    return out


def main() -> int:
    return run_bench("guards", bench)


if __name__ == "__main__":
    sys.exit(main())
