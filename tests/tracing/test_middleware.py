"""TracingMiddleware with the SDK's in-memory exporter: one trace per run, run -> step ->
node, and no content in any attribute."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hypha_celery import Finish, Graph, Hypha, Next, Node, RunFailed, Settings
from hypha_celery.middleware import Attempt, AttemptEnd, Call, CallEnd, RunEnd, RunStart, Step
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
    p1.force_flush()  # what waits for the hand-over thread goes now
    p2.force_flush()
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


def calling(state: dict[str, Any], inp: Any, ctx: Any) -> dict[str, Any]:
    found = ctx.tool("search", lambda args: ["hit"], {"q": inp})
    answer = ctx.model("local:echo", lambda req: {"text": "ok", "usage": {}}, {"prompt": inp})

    def down(args: Any) -> Any:
        raise ConnectionError(SECRET)

    with contextlib.suppress(ConnectionError):
        ctx.tool("fetch", down, {"url": inp})
    return {"n": [found, answer["text"]]}


def test_each_model_and_tool_call_is_a_span_under_its_node(
        sqlite_url: str, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=True),
                  middleware=[TracingMiddleware(provider)])
    try:
        hypha.register(Graph("t_calls", {"a": Node(calling)}, policy))
        run = hypha.start("t_calls", SECRET)
        assert run.wait(30) == {"n": [["hit"], "ok"]}
        wait_for(exporter, "hypha.run ", 1)
    finally:
        hypha.close()
    root = run_span_context(run.id)
    mine = [s for s in exporter.get_finished_spans() if s.context.trace_id == root.trace_id]
    [node] = by_name(mine, "hypha.node a")
    calls = by_name(mine, "hypha.call ")
    assert [c.name for c in calls] == ["hypha.call search", "hypha.call local:echo",
                                       "hypha.call fetch"]
    for call in calls:
        assert call.parent is not None and call.parent.span_id == node.context.span_id
        assert node.start_time is not None and call.start_time is not None
        assert node.start_time <= call.start_time
    search, model, fetch = (dict(c.attributes or {}) for c in calls)
    eid = dict(node.attributes or {})["hypha.execution_id"]
    assert search == {"hypha.run_id": run.id, "hypha.execution_id": eid, "hypha.node": "a",
                      "hypha.call.kind": "tool", "hypha.call.name": "search",
                      "hypha.call.id": f"{eid}:t0"}
    assert model["hypha.call.kind"] == "model" and model["hypha.call.name"] == "local:echo"
    assert fetch["hypha.error_type"] == "ConnectionError"
    assert calls[2].status.status_code.name == "ERROR"
    for span in mine:  # no request, output or error message
        assert SECRET not in str(dict(span.attributes or {}))
        assert SECRET not in str(span.status.description)


def test_a_call_span_carries_the_token_counts(
        provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    tracing = TracingMiddleware(provider)
    attempt = Attempt("r3", "r3.1", "ask", 1)
    call = Call("r3", "r3.1", "ask", "model", "openai:gpt-test", "r3.1:m0")
    tracing.before_attempt(attempt)
    tracing.before_call(call)
    tracing.after_call(call, CallEnd(0.2, None, 10, 5, 0, None))
    tracing.after_attempt(attempt, AttemptEnd(True, None, 0.3))
    provider.force_flush()
    [span] = by_name(exporter.get_finished_spans(), "hypha.call")
    [node] = by_name(exporter.get_finished_spans(), "hypha.node")
    assert span.parent is not None and span.parent.span_id == node.context.span_id
    assert span.context.trace_id == run_span_context("r3").trace_id
    assert span.attributes is not None
    assert {k: v for k, v in span.attributes.items() if k.startswith("hypha.call.")} == {
        "hypha.call.kind": "model", "hypha.call.name": "openai:gpt-test",
        "hypha.call.id": "r3.1:m0", "hypha.call.input_tokens": 10,
        "hypha.call.output_tokens": 5, "hypha.call.cache_read_tokens": 0}
    assert span.status.status_code.name == "UNSET"


def test_without_the_extra_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from hypha_celery.errors import ExtraNotInstalled

    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(ExtraNotInstalled, match=r"hypha-celery\[tracing\]"):
        TracingMiddleware()


def test_a_ratio_sampler_traces_a_run_whole_or_not_at_all() -> None:
    """Two processes, each with ``ParentBased(TraceIdRatioBased(0.5))``: every run is
    either traced in both (root, step and node) or in neither; the decision is the root's,
    made from the run's trace id."""
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    exporters = [InMemorySpanExporter(), InMemorySpanExporter()]
    middleware = []
    for exp in exporters:
        p = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.5)))
        p.add_span_processor(SimpleSpanProcessor(exp))
        middleware.append(TracingMiddleware(p))
    client, worker = middleware
    runs = [f"sampled-{i}" for i in range(60)]
    for rid in runs:
        client.after_run_start(RunStart(rid, "g"))
        worker.before_step(Step(rid, f"{rid}.0"))
        worker.before_attempt(Attempt(rid, f"{rid}.1", "n", 1))
        worker.before_call(Call(rid, f"{rid}.1", "n", "tool", "t", "c1"))
        worker.after_call(Call(rid, f"{rid}.1", "n", "tool", "t", "c1"), CallEnd(0.01))
        worker.after_attempt(Attempt(rid, f"{rid}.1", "n", 1), AttemptEnd(True))
        worker.after_step(Step(rid, f"{rid}.0"), None)
        worker.after_run_end(RunEnd(rid, "completed", graph_id="g"))
    for mw in middleware:
        assert mw.sink is not None
        mw.sink.flush()
    spans = [s for exp in exporters for s in exp.get_finished_spans()]
    per_run: dict[int, list[str]] = {}
    for span in spans:
        per_run.setdefault(span.context.trace_id, []).append(span.name.split()[0])
    assert 10 < len(per_run) < 50  # about half the runs
    assert all(sorted(names) == ["hypha.admit", "hypha.call", "hypha.node", "hypha.run",
                                 "hypha.step"] for names in per_run.values())
