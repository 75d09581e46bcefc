"""Acceptance 7: Flower against the test broker lists node tasks as ``graph.node``.

Flower runs as its own process (``celery -A tests.integration.app:celery flower``)
next to the shared Redis worker, which sends task events (``-E``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests import services
from tests.integration.helpers import APP, REPO, WAIT, Stack

pytestmark = pytest.mark.services


class Flower:
    def __init__(self, s: Stack, log: Any) -> None:
        self.port = services.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = s.backends.env(FLOWER_UNAUTHENTICATED_API="true")
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", APP, "flower", f"--port={self.port}",
                 "--address=127.0.0.1"],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)

    def get(self, path: str) -> Any:
        if self.proc.poll() is not None:
            raise AssertionError(f"flower exited {self.proc.returncode}:\n"
                                 f"{self.log.read_text()[-3000:]}")
        try:
            reply = requests.get(self.url + path, timeout=2)
        except requests.ConnectionError:
            return None
        return reply.json() if reply.status_code == 200 else None

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def flower(redis_stack: Stack, tmp_path: Any) -> Iterator[Flower]:
    f = Flower(redis_stack, tmp_path / "flower.log")
    try:
        yield f
    finally:
        f.stop()


def test_flower_lists_node_tasks_by_graph_and_node_name(redis_stack: Stack,
                                                        flower: Flower) -> None:
    s = redis_stack
    end = time.monotonic() + WAIT
    while flower.get("/api/tasks") is None:  # up and answering
        assert time.monotonic() < end, flower.log.read_text()[-3000:]
        time.sleep(0.2)
    # Flower only sees the events sent after it subscribed: run the graph until
    # Flower shows one run's tasks (task ids are the run's execution ids)
    while True:
        run = s.client.start("itest", {"question": "q", "edges": [["a", 0.0, False]]})
        s.wait(run)
        seen = _poll(flower, run.id, until=min(end, time.monotonic() + 5))
        if seen is not None:
            break
        assert time.monotonic() < end, (flower.get("/api/tasks"),
                                        flower.log.read_text()[-3000:])
    assert seen[f"{run.id}.1"] == "itest.classify"
    assert seen[f"{run.id}.2.0"] == "itest.lookup"  # an edge of the fan-out


def _poll(flower: Flower, run_id: str, until: float) -> dict[str, str] | None:
    """Task id -> name of ``run_id``'s node tasks once Flower has them all."""
    wanted = {f"{run_id}.1", f"{run_id}.2.0"}
    while time.monotonic() < until:
        tasks = flower.get("/api/tasks") or {}
        names = {tid: t.get("name") for tid, t in tasks.items() if tid in wanted}
        if len(names) == len(wanted) and all(names.values()):
            return {tid: str(name) for tid, name in names.items()}
        time.sleep(0.2)
    return None
