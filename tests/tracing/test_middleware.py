"""TracingMiddleware with the SDK's in-memory exporter: one trace per run, run -> step ->
node, and no content in any attribute."""

from __future__ import annotations

import time
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hypha_celery import Finish, Graph, Hypha, Next, Node, RunFailed, Settings
from hypha_celery.middleware import Attempt, AttemptEnd, RunEnd, RunStart, Step
from hypha_celery.tracing import TracingMiddleware, run_span_context

SECRET = "s3cret-input"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(exporter))
    return p


def by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], prefix: str
            ) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def test_two_middleware_make_one_trace_per_run_without_sharing_anything(
        exporter: InMemorySpanExporter) -> None:
    # two processes: two providers, two middleware, nothing passed between them
    other = InMemorySpanExporter()
    p1, p2 = TracerProvider(), TracerProvider()
    p1.add_span_processor(SimpleSpanProcessor(exporter))
    p2.add_span_processor(SimpleSpanProcessor(other))
    client, worker = TracingMiddleware(p1), TracingMiddleware(p2)
    client.after_run_start(RunStart("r1", "g"))
    worker.before_step(Step("r1", "r1.0"))
    worker.before_attempt(Attempt("r1", "r1.1", "lookup", 2))
    worker.after_attempt(Attempt("r1", "r1.1", "lookup", 2), AttemptEnd(False, "ValueError"))
    worker.after_run_end(RunEnd("r1", "failed", "dead_lettered", graph_id="g"))
    worker.after_step(Step("r1", "r1.0"), None)
    spans = [*exporter.get_finished_spans(), *other.get_finished_spans()]
    root = run_span_context("r1")
    assert {s.context.trace_id for s in spans} == {root.trace_id}
    [run] = by_name(spans, "hypha.run g")
    assert run.context.span_id == root.span_id and run.parent is None
    assert run.attributes == {"hypha.run_id": "r1", "hypha.graph": "g",
                              "hypha.status": "failed", "hypha.reason": "dead_lettered"}
    assert run.status.status_code.name == "ERROR"
    [admit] = by_name(spans, "hypha.admit")
    [step] = by_name(spans, "hypha.step")
    assert admit.parent is not None and admit.parent.span_id == root.span_id
    assert step.parent is not None and step.parent.span_id == root.span_id
    [node] = by_name(spans, "hypha.node lookup")
    assert node.attributes is not None and node.attributes["hypha.attempt"] == 2
    assert node.attributes["hypha.error_type"] == "ValueError"
    assert run_span_context("r2").trace_id != root.trace_id


def policy(ctx: Any) -> Next | Finish:
    if ctx.step == 0:
        return Next("a", ctx.input)
    return Finish(ctx.state)


def ok(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {"n": inp}


def bad(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    raise ConnectionError(SECRET)


def wait_for(exporter: InMemorySpanExporter, name: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(
            by_name(exporter.get_finished_spans(), name)) < count:
        time.sleep(0.02)  # the after-commit hooks run right after the waiter wakes


def test_an_embedded_run_is_one_trace_run_step_node(
        sqlite_url: str, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=True),
                  middleware=[TracingMiddleware(provider)])
    try:
        hypha.register(Graph("t_ok", {"a": Node(ok)}, policy))
        hypha.register(Graph("t_bad", {"a": Node(bad)}, policy))
        run = hypha.start("t_ok", SECRET)
        assert run.wait(30) == {"n": SECRET}
        with pytest.raises(RunFailed):
            hypha.start("t_bad", SECRET).wait(30)
        wait_for(exporter, "hypha.run ", 2)
    finally:
        hypha.close()
    spans = exporter.get_finished_spans()
    root = run_span_context(run.id)
    mine = [s for s in spans if s.context.trace_id == root.trace_id]
    [run_span] = by_name(mine, "hypha.run t_ok")
    assert run_span.context.span_id == root.span_id
    assert run_span.attributes is not None and run_span.attributes["hypha.status"] == \
        "completed"
    steps = by_name(mine, "hypha.step")
    assert steps and all(s.parent and s.parent.span_id == root.span_id for s in steps)
    [node] = by_name(mine, "hypha.node a")
    assert node.parent is not None
    assert node.parent.span_id in {s.context.span_id for s in steps}  # the step that sent it
    assert run_span.start_time is not None and node.start_time is not None
    assert run_span.start_time <= node.start_time
    [failed] = by_name(spans, "hypha.run t_bad")
    assert failed.context.trace_id != root.trace_id
    for span in spans:  # no input, state, output or error message anywhere
        assert SECRET not in str(dict(span.attributes or {}))
        assert SECRET not in str(span.status.description)
        assert all(SECRET not in str(dict(e.attributes or {})) for e in span.events)


def test_without_the_extra_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from hypha_celery.errors import ExtraNotInstalled

    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(ExtraNotInstalled, match=r"hypha-celery\[tracing\]"):
        TracingMiddleware()
