"""The CLI against Redis + PostgreSQL with a real ``hypha worker`` process (prefork)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hypha_celery.store import EventStore
from tests.cli.helpers import HYPHA, ROOT, assert_one_line_error, clean_env, hypha

pytestmark = pytest.mark.services

APP = "examples.support:hypha"
WAIT = 30.0


class Cluster:
    def __init__(self, redis_url: str, pg_url: str, log: Path) -> None:
        self.env = clean_env(HYPHA_BROKER_URL=redis_url, HYPHA_STORE_URL=pg_url)
        self.pg_url = pg_url
        self.log = log
        self.store = EventStore(pg_url)

    def hypha(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return hypha(*args, env={**self.env, **env})

    def start(self, payload: Any, *extra: str) -> str:
        proc = self.hypha("run", "support", "--app", APP, "--input", json.dumps(payload), *extra)
        assert proc.returncode == 0, (proc.stderr, self.log.read_text()[-3000:])
        return proc.stdout.splitlines()[0]

    def kinds(self, run_id: str) -> list[str]:
        return [e.kind for e in self.store.events(run_id)]

    def wait_for(self, run_id: str, kind: str) -> list[str]:
        end = time.monotonic() + WAIT
        while kind not in (kinds := self.kinds(run_id)):
            assert time.monotonic() < end, (kinds, self.log.read_text()[-3000:])
            time.sleep(0.05)
        return kinds


@pytest.fixture(scope="module")
def cluster(redis_url: str, pg_url: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    c = Cluster(redis_url, pg_url, log)
    with log.open("w") as out:
        worker = subprocess.Popen(
            [HYPHA, "worker", "--app", APP, "--pool", "prefork", "--concurrency", "2",
             "--loglevel", "INFO", f"--hostname=hypha-cli-{uuid.uuid4().hex[:8]}@%h",
             "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=c.env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield c
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)
        c.store.dispose()


@pytest.fixture(scope="module")
def completed(cluster: Cluster) -> str:
    """A run started and awaited through the CLI; doubles as the worker's readiness check."""
    proc = cluster.hypha("run", "support", "--app", APP, "--input",
                         '{"question": "why a double charge?"}', "--user-id", "u1",
                         "--session-id", "s1", "--wait", "--timeout", str(WAIT))
    assert proc.returncode == 0, (proc.stderr, cluster.log.read_text()[-3000:])
    run_id, _, result = proc.stdout.partition("\n")
    assert json.loads(result) == {"answer": "billing: 14 hits",
                                  "sources": ["faq", "tickets", "wiki"]}
    return run_id


def test_run_wait_then_status_and_events(cluster: Cluster, completed: str) -> None:
    status = cluster.hypha("status", completed)  # no --app: Hypha.from_env()
    assert status.returncode == 0, status.stderr
    rows = dict(line.split(None, 1) for line in status.stdout.splitlines())
    assert rows["status"] == "completed" and rows["graph"] == "support"
    events = cluster.hypha("events", completed)
    assert events.returncode == 0, events.stderr
    assert [line.split()[2] for line in events.stdout.splitlines()] == cluster.kinds(completed)
    assert "double charge" not in events.stdout + status.stdout  # no input in either
    raw = cluster.hypha("events", completed, "--json").stdout.splitlines()
    assert [json.loads(line)["seq"] for line in raw] == list(range(1, len(raw) + 1))


def test_events_follow_prints_until_the_run_ends(cluster: Cluster) -> None:
    run_id = cluster.start({"question": "login broken", "latency": 0.3})
    proc = cluster.hypha("events", run_id, "--follow")
    assert proc.returncode == 0, proc.stderr
    kinds = [line.split()[2] for line in proc.stdout.splitlines()]
    assert kinds[0] == "run.created"
    assert kinds[-1] == "run.completed"
    assert kinds.count("node.execution.completed") == 5
    assert "node.reducer.completed" in kinds


def test_cancel_a_running_fan_out(cluster: Cluster) -> None:
    run_id = cluster.start({"question": "refund?", "latency": 4.0})
    cluster.wait_for(run_id, "node.fanout.scheduled")
    proc = cluster.hypha("cancel", run_id)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"cancelled {run_id}"
    status = cluster.hypha("status", run_id, "--json")
    assert json.loads(status.stdout)["status"] == "cancelled"
    again = cluster.hypha("cancel", run_id)
    assert again.returncode == 0 and "already ended (cancelled)" in again.stdout
    kinds = cluster.wait_for(run_id,
                             "node.execution.late_result")  # the lookups end after the cancel
    assert "run.completed" not in kinds and kinds.count("run.cancelled") == 1


def test_failures_and_wait_timeouts_exit_1_with_one_line(cluster: Cluster) -> None:
    failed = cluster.hypha("run", "support", "--app", APP, "--input", "{}", "--wait",
                           "--timeout", str(WAIT))
    error = assert_one_line_error(failed)
    assert "failed: node_failed: classify: ValueError" in error
    run_id = failed.stdout.strip()
    assert json.loads(cluster.hypha("status", run_id, "--json").stdout)["error"]["reason"] == (
        "node_failed")

    slow = cluster.hypha("run", "support", "--app", APP, "--input",
                         '{"question": "q", "latency": 0.5}', "--wait", "--timeout", "0.1")
    assert "still running after 0.1s" in assert_one_line_error(slow)
    cluster.wait_for(slow.stdout.strip(), "run.completed")  # the run itself goes on

    unknown = cluster.hypha("status", "no-such-run")
    assert "no run 'no-such-run'" in assert_one_line_error(unknown)


def test_export_then_import_into_a_fresh_sqlite_store(cluster: Cluster, completed: str,
                                                      tmp_path: Path) -> None:
    failed = cluster.hypha("run", "support", "--app", APP, "--input", "{}", "--wait")
    failed_id = failed.stdout.strip()
    out = tmp_path / "runs.jsonl"
    proc = cluster.hypha("export", completed, failed_id, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "of 2 runs" in proc.stderr
    everything = cluster.hypha("export").stdout.splitlines()
    assert set(out.read_text().splitlines()) <= set(everything)

    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    imported = hypha("import", str(out), env=clean_env(HYPHA_STORE_URL=fresh))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("imported 2 runs")
    copy = EventStore(fresh)
    try:
        for run_id in (completed, failed_id):
            assert copy.events(run_id) == cluster.store.events(run_id)
            mine, theirs = copy.get(run_id), cluster.store.get(run_id)
            for key in ("status", "state", "result", "error", "step", "graph_id"):
                assert mine[key] == theirs[key], key
        status = hypha("status", failed_id, env=clean_env(HYPHA_STORE_URL=fresh))
        assert "node_failed" in status.stdout
    finally:
        copy.dispose()
