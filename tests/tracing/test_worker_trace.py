"""One trace per run across processes: a client and a real prefork worker (concurrency
2), each with its own TracerProvider, nothing shared but the run id and the Celery
message headers. The worker exports its spans to a file (tests/tracing/worker_app.py).
A node's model call (``ctx.llm`` to the fake model server) and tool call are spans under
the node's."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hypha_celery import Hypha
from hypha_celery.demo import GRAPH_ID, demo_graph
from hypha_celery.tracing import TracingMiddleware, run_span_context
from tests.fakes.llm_server import FakeLLM, Reply
from tests.integration.helpers import Backends, Worker, close_client, purge, wait_until
from tests.tracing import graphs
from tests.tracing.spans import span_json

APP = "tests.tracing.worker_app:celery"
QUESTION = "charge 42 twice on my card"
#: Attribute keys a span may carry: ids, names, attempts, status, reasons, error types.
ALLOWED = {"hypha.run_id", "hypha.graph", "hypha.queued", "hypha.status", "hypha.reason",
           "hypha.execution_id", "hypha.node", "hypha.attempt", "hypha.outcome",
           "hypha.error_type", "hypha.call.kind", "hypha.call.name", "hypha.call.id",
           "hypha.call.input_tokens", "hypha.call.output_tokens",
           "hypha.call.cache_read_tokens", "hypha.call.cache_write_tokens"}


@pytest.fixture
def client(redis_url: str, pg_url: str) -> Iterator[tuple[Backends, Hypha,
                                                          InMemorySpanExporter]]:
    backends = Backends("redis", redis_url, redis_url, pg_url)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hypha = Hypha(backends.settings(), middleware=[TracingMiddleware(provider)])
    hypha.register(demo_graph())
    hypha.register(graphs.calls_graph())
    hypha.store.migrate()
    purge(redis_url, sorted(hypha.queues()))
    try:
        yield backends, hypha, exporter
    finally:
        close_client(hypha)
        provider.shutdown()


def read_spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-tracing-test")
    with FakeLLM(default=Reply.text("the answer", usage=(11, 4, 0, 0))) as server:
        yield server


def test_one_trace_per_run_across_the_client_and_a_worker(
        client: tuple[Backends, Hypha, InMemorySpanExporter], fake_llm: FakeLLM,
        tmp_path: Path) -> None:
    backends, hypha, exporter = client
    spans_file = tmp_path / "spans.jsonl"
    worker = Worker(backends, tmp_path / "worker.log", queues=sorted(hypha.queues()),
                    concurrency=2, app=APP,
                    env={"HYPHA_TEST_SPANS": str(spans_file), "OPENAI_API_KEY": "sk-tracing-test",
                         "HYPHA_MODEL_BASE_URLS": json.dumps({"openai": fake_llm.openai_url})})
    try:
        worker.start(hypha.celery)
        runs = [hypha.start(GRAPH_ID, {"question": QUESTION}) for _ in range(2)]
        asked = hypha.start(graphs.GRAPH_ID, QUESTION)
        for run in runs:
            run.wait(timeout=60)
        assert asked.wait(timeout=60) == {"hits": ["doc-1"], "answer": "the answer"}

        def run_spans_exported() -> bool:
            names = [s["name"] for s in read_spans(spans_file)]
            return (names.count(f"hypha.run {GRAPH_ID}") >= len(runs)
                    and f"hypha.run {graphs.GRAPH_ID}" in names)

        wait_until(run_spans_exported, what="the run spans in the worker's file",
                   log=worker.tail)
    finally:
        worker.stop()
    local = [{**span_json(s), "pid": os.getpid()} for s in exporter.get_finished_spans()]
    everything = read_spans(spans_file) + local
    for run in runs:
        root = run_span_context(run.id)
        trace_id = f"{root.trace_id:032x}"
        spans = [s for s in everything if s["attributes"].get("hypha.run_id") == run.id]
        assert {s["trace_id"] for s in spans} == {trace_id}  # one trace for the run
        assert os.getpid() in {s["pid"] for s in spans}  # the client's admission
        assert len({s["pid"] for s in spans}) >= 2  # and the worker's
        by_id = {s["span_id"]: s for s in spans}
        [run_span] = [s for s in spans if s["name"] == f"hypha.run {GRAPH_ID}"]
        assert run_span["span_id"] == f"{root.span_id:016x}"
        assert run_span["parent_id"] is None
        assert run_span["attributes"]["hypha.status"] == "completed"
        steps = [s for s in spans if s["name"] == "hypha.step"]
        nodes = [s for s in spans if s["name"].startswith("hypha.node ")]
        assert steps and all(s["parent_id"] == run_span["span_id"] for s in steps)
        assert {n["name"] for n in nodes} >= {"hypha.node classify", "hypha.node answer"}
        for node in nodes:  # each node is the child of the step that decided it
            assert by_id[node["parent_id"]]["name"] == "hypha.step"
            assert node["start"] >= run_span["start"]
        [admit] = [s for s in spans if s["name"] == "hypha.admit"]
        assert admit["parent_id"] == run_span["span_id"] and admit["pid"] == os.getpid()
    # the model and tool calls: spans under the node's, in the run's trace
    spans = [s for s in everything if s["attributes"].get("hypha.run_id") == asked.id]
    assert {s["trace_id"] for s in spans} == {f"{run_span_context(asked.id).trace_id:032x}"}
    [node] = [s for s in spans if s["name"] == "hypha.node ask"]
    calls = sorted((s for s in spans if s["name"].startswith("hypha.call ")),
                   key=lambda s: s["start"])
    assert [c["name"] for c in calls] == [f"hypha.call {graphs.TOOL}",
                                          f"hypha.call {graphs.MODEL}"]
    tool, model = (c["attributes"] for c in calls)
    assert all(c["parent_id"] == node["span_id"] and c["pid"] == node["pid"] for c in calls)
    assert node["start"] <= calls[0]["start"] and calls[-1]["end"] <= node["end"]
    assert tool["hypha.call.kind"] == "tool" and model["hypha.call.kind"] == "model"
    assert (model["hypha.call.input_tokens"], model["hypha.call.output_tokens"]) == (11, 4)
    assert "hypha.error_type" not in model
    for span in everything:  # attributes without content
        assert set(span["attributes"]) <= ALLOWED, span
        assert QUESTION not in json.dumps(span)
