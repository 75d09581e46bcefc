"""A real prefork worker (concurrency 2) with ``HYPHA_METRICS_PORT``: runs of the demo
graph, then its ``/metrics`` scraped over HTTP (the children's counts summed by the
main process, the queue depths read on scrape)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from hypha_celery import Hypha
from hypha_celery.beat.singleton import KEY as SWEEP_LOCK
from hypha_celery.demo import GRAPH_ID, demo_graph
from hypha_celery.runtime.config import SUPERVISOR_TASK
from tests.integration.helpers import (
    Backends,
    Worker,
    close_client,
    purge,
    wait_until,
)
from tests.services import free_port, port_open

APP = "tests.metrics.worker_app:celery"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def client(redis_url: str, pg_url: str) -> Iterator[tuple[Backends, Hypha]]:
    backends = Backends("redis", redis_url, redis_url, pg_url)
    hypha = Hypha(backends.settings())
    hypha.register(demo_graph())
    hypha.store.migrate()
    purge(redis_url, sorted(hypha.queues()))
    side = redis.Redis.from_url(redis_url)
    side.delete(SWEEP_LOCK)  # the sweep this test sends must not be skipped
    try:
        yield backends, hypha
    finally:
        side.delete(SWEEP_LOCK)  # nor leave a beat-sent sweep's lock to later tests
        side.close()
        close_client(hypha)


def test_a_prefork_worker_serves_its_metrics(client: tuple[Backends, Hypha],
                                             tmp_path: Path) -> None:
    backends, hypha = client
    port = free_port()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    worker = Worker(backends, tmp_path / "worker.log", queues=sorted(hypha.queues()),
                    concurrency=2, app=APP,
                    env={"HYPHA_METRICS_PORT": str(port), "HYPHA_METRICS_ADDR": "127.0.0.1",
                         "TMPDIR": str(tmp)})
    try:
        worker.start(hypha.celery)
        wait_until(lambda: port_open("127.0.0.1", port), what="the metrics port",
                   log=worker.tail)
        runs = [hypha.start(GRAPH_ID, {"question": f"charge {i}"}) for i in range(4)]
        for run in runs:
            run.wait(timeout=30)
        hypha.celery.send_task(SUPERVISOR_TASK)

        last: list[Samples] = [{}]

        def scraped() -> Samples | None:
            s = last[0] = scrape(port)
            done = sample(s, "hypha_runs_completed_total", graph=GRAPH_ID) or 0
            swept = sample(s, "hypha_supervisor_sweep_duration_seconds_count") or 0
            return s if done >= len(runs) and swept >= 1 else None

        s = wait_until(scraped, what="the runs and the sweep in /metrics",
                       log=lambda: f"{worker.tail()}\n--- last scrape ---\n{last[0]}")
        # five nodes ran per run (classify, three lookups, answer): in both children
        lookups = sample(s, "hypha_node_duration_seconds_count", node="lookup", outcome="ok")
        assert lookups == 3 * len(runs)
        assert sample(s, "hypha_node_duration_seconds_count", node="classify",
                      outcome="ok") == len(runs)
        assert sample(s, "hypha_queue_depth", queue="hypha.nodes") == 0
        assert sample(s, "hypha_queue_depth", queue="hypha.coordinator") is not None
        assert not any(run.id in str(key) for key in s for run in runs)
        made = list(tmp.glob("hypha-metrics-*"))
        assert len(made) == 1 and list(made[0].glob("*.db"))  # multiprocess mode
    finally:
        worker.stop()
    assert not port_open("127.0.0.1", port)
    assert not list(tmp.glob("hypha-metrics-*"))  # removed with the worker
