"""Metric names present before first use: a fresh worker process in multiprocess mode
(a process of its own: prometheus_client picks its mode at import) exposes every
recorded metric whose labels can be known, at 0, so that ``absent()`` alerts stay quiet
on a healthy deployment; a graph registered after ``export`` at the next scrape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from hypha_celery.metrics import names
from hypha_celery.metrics._initial import DEAD_LETTER_REASONS, LATE_REASONS

ROOT = Path(__file__).resolve().parents[2]

FRESH_WORKER = r"""
import json
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from hypha_celery import Finish, Graph, Hypha, Settings
from hypha_celery.demo import demo_graph
from hypha_celery.metrics import PrometheusMiddleware, collector_of, export

broker = "redis://127.0.0.1:1/0"  # never reached
hypha = Hypha(Settings(broker, broker, "sqlite://", False), middleware=[PrometheusMiddleware()])
hypha.register(demo_graph())
export(hypha)


def scrape():
    reg = CollectorRegistry()
    MultiProcessCollector(reg)
    return generate_latest(reg).decode()


first = scrape()
"""


def run_fresh_worker(tmp_path: Path, tail: str) -> dict[str, str]:
    """FRESH_WORKER then ``tail`` in a process of its own; the JSON its last line prints."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
           "HYPHA_METRICS_PORT": "65000", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", FRESH_WORKER + tail], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_a_fresh_multiprocess_worker_exposes_every_knowable_name_at_0(tmp_path: Path) -> None:
    scraped = run_fresh_worker(tmp_path, "print(json.dumps({'first': first}))\n")
    found = families(scraped["first"])
    unknowable = {names.CALL_DURATION, getattr(names, "MODEL_CALL_FAILURES", ""),
                  names.MCP_CALLS, names.MCP_CALL_SECONDS}  # made at an MCP discovery
    expected = [n for n in names.RECORDED if n not in unknowable]
    missing = [n for n in expected
               if not any(s.startswith(n) for s in found)]
    assert missing == [], sorted(found)
    for name in ("hypha_runs_cancelled_total", "hypha_runs_queued_total",
                 "hypha_late_results_total", "hypha_dead_letters_total",
                 "hypha_node_duration_seconds_count", "hypha_runs_failed_total"):
        assert found[name] and all(value == 0 for _, value in found[name]), name
    assert ({"graph": "support"}, 0.0) in found["hypha_runs_cancelled_total"]
    assert ({"graph": "support", "reason": "dead_lettered"}, 0.0) in found[
        "hypha_runs_failed_total"]
    late = {(labels["node"], labels["reason"]) for labels, _ in found["hypha_late_results_total"]}
    assert ("classify", "timeout") in late and len(late) == len(LATE_REASONS) * len(
        {labels["node"] for labels, _ in found["hypha_late_results_total"]})
    outcomes = {labels["outcome"] for labels, _ in found["hypha_node_duration_seconds_count"]}
    assert outcomes == {"ok", "error"}
    assert names.CALL_DURATION + "_count" not in found  # a model or tool's name: unknowable


def test_a_graph_registered_after_export_appears_at_the_next_scrape(tmp_path: Path) -> None:
    tail = ("collector = collector_of(hypha)\n"
            "hypha.register(Graph('later', {'step': lambda s, i: {}}, lambda ctx: Finish(None)))\n"
            "second = scrape()\n"
            "collector.before()  # what a scrape calls first\n"
            "print(json.dumps({'first': first, 'second': second, 'third': scrape()}))\n")
    scraped = run_fresh_worker(tmp_path, tail)
    graphs = [{labels["graph"] for labels, _ in families(scraped[key])
               ["hypha_runs_started_total"]} for key in ("first", "second", "third")]
    assert graphs == [{"support"}, {"support"}, {"support", "later"}]


def test_the_late_reasons_are_the_runtimes() -> None:
    from hypha_celery.runtime import late

    assert set(LATE_REASONS) == {*late._REASONS.values(), "timeout", "run_ended"}
    assert set(DEAD_LETTER_REASONS) == {"retries_exhausted", "delivery_limit"}
