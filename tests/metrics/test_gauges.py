"""The gauges read on scrape (queue depths from a real Redis broker, agents by phase
from the store), the exporter's settings and ``hypha metrics``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from click.testing import CliRunner
from kombu import Connection, Exchange, Producer, Queue
from prometheus_client import CollectorRegistry

from hypha_celery.cli.main import cli
from hypha_celery.errors import ExtraNotInstalled, SetupError
from hypha_celery.metrics import HyphaCollector, names, queue_depths
from hypha_celery.metrics import _client as client
from hypha_celery.metrics import _exporter as exporter
from hypha_celery.store import EventStore
from hypha_celery.store import agents as agent_rows
from tests.integration.helpers import purge, rabbit_vhost

QUEUE = "hypha.metrics_test"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.fixture
def app(redis_url: str) -> Iterator[Celery]:
    celery = Celery("metrics-test", broker=redis_url)
    purge(redis_url, [QUEUE])
    try:
        yield celery
    finally:
        purge(redis_url, [QUEUE])
        celery.close()


def publish(redis_url: str, n: int, priority: int | None = None) -> None:
    queue = Queue(QUEUE, Exchange(QUEUE, "direct"), QUEUE, max_priority=10)
    with Connection(redis_url) as conn:
        producer = Producer(conn.channel())
        for i in range(n):
            producer.publish({"i": i}, exchange=queue.exchange, routing_key=QUEUE,
                             declare=[queue], priority=priority)


def test_queue_depths_count_every_priority_list(app: Celery, redis_url: str) -> None:
    assert queue_depths(app, [QUEUE, "hypha.never_used"]) == {
        "hypha.metrics_test": 0, "hypha.never_used": 0}
    publish(redis_url, 2)
    publish(redis_url, 3, priority=9)  # kombu keeps it in another list
    assert queue_depths(app, [QUEUE]) == {QUEUE: 5}


def test_queue_depths_on_rabbitmq(amqp_url: str) -> None:
    with rabbit_vhost(amqp_url) as broker:
        app = Celery("metrics-rabbit", broker=broker)
        try:
            purge(broker, [QUEUE])
            publish(broker, 3)
            assert queue_depths(app, [QUEUE, "hypha.never_declared"]) == {
                QUEUE: 3, "hypha.never_declared": 0}
        finally:
            purge(broker, [QUEUE])
            with Connection(broker) as conn:
                conn.channel().queue_delete(QUEUE)
            app.close()


def test_the_collector_yields_queue_depths_and_agents(app: Celery, redis_url: str,
                                                      tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'hypha.db'}")
    try:
        store.migrate()
        agent_rows.create(store, "a1", "i1", "chat", "idle", {}, None)
        agent_rows.create(store, "a2", "i2", "chat", "busy", {}, None)
        agent_rows.create(store, "a3", "i3", "chat", "busy", {}, None)
        publish(redis_url, 1)
        registry = CollectorRegistry()
        registry.register(HyphaCollector(app, lambda: [QUEUE], store))
        assert registry.get_sample_value(names.QUEUE_DEPTH, {"queue": QUEUE}) == 1
        assert registry.get_sample_value(names.AGENTS, {"phase": "busy"}) == 2
        assert registry.get_sample_value(names.AGENTS, {"phase": "idle"}) == 1
    finally:
        store.dispose()


def test_a_broker_that_does_not_answer_leaves_the_gauge_out() -> None:
    down = Celery("metrics-down", broker="redis://127.0.0.1:1/0")
    try:
        registry = CollectorRegistry()
        registry.register(HyphaCollector(down, lambda: [QUEUE]))
        assert registry.get_sample_value(names.QUEUE_DEPTH, {"queue": QUEUE}) is None
    finally:
        down.close()


def test_the_metrics_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(exporter.PORT_ENV, raising=False)
    assert exporter.metrics_port() is None
    assert exporter.prepare_multiprocess() is None  # no port: no multiprocess mode
    monkeypatch.setenv(exporter.PORT_ENV, "9464")
    assert exporter.metrics_port() == 9464
    for bad in ("http", "0", "70000"):
        monkeypatch.setenv(exporter.PORT_ENV, bad)
        with pytest.raises(SetupError):
            exporter.metrics_port()


def test_hypha_metrics_prints_queue_depths(redis_url: str, pg_url: str) -> None:
    env = {"HYPHA_BROKER_URL": redis_url, "HYPHA_RESULT_BACKEND": redis_url,
           "HYPHA_STORE_URL": pg_url}
    purge(redis_url, ["hypha.nodes"])
    as_json = CliRunner().invoke(cli, ["metrics", "--json"], env=env)
    assert as_json.exit_code == 0, as_json.output
    depths = json.loads(as_json.output)
    assert depths["hypha.nodes"] == 0 and "hypha.coordinator" in depths
    table = CliRunner().invoke(cli, ["metrics"], env=env)
    assert table.exit_code == 0, table.output
    assert table.output.splitlines()[0].split() == ["QUEUE", "MESSAGES"]
    assert any(line.split() == ["hypha.nodes", "0"] for line in table.output.splitlines())


def test_hypha_metrics_needs_a_broker(monkeypatch: pytest.MonkeyPatch,
                                     tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli, ["metrics"], env={"HYPHA_BROKER_URL": ""})
    assert done.exit_code == 2 and "HYPHA_BROKER_URL" in done.output


def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    with pytest.raises(ExtraNotInstalled, match=r"hypha-celery\[metrics\]"):
        client.prometheus()


def test_the_docs_list_every_metric() -> None:
    section = DOCS.read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    for name in names.ALL:
        assert f"`{name}" in section, name
