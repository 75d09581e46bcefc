"""``HyphaSpan``: hypha's spans are made by hand and handed to the SDK's span processor.
These tests fail when the SDK changes what a finished span is: each exported field is
compared with a span the SDK's own tracer made from the same inputs."""

from __future__ import annotations

import json
import time

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hypha_celery.middleware import Attempt, AttemptEnd, RunEnd, Step
from hypha_celery.tracing import TracingMiddleware, run_span_context
from hypha_celery.tracing import _spans as spans
from hypha_celery.tracing._spans import SCOPE, HyphaSpan, sink_of


def pipeline() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def fields(span: ReadableSpan) -> dict[str, object]:
    """What an exporter reads of a span, but its ids and times."""
    return {"name": span.name, "kind": span.kind, "status": span.status.status_code,
            "description": span.status.description, "attributes": dict(span.attributes or {}),
            "events": [(e.name, dict(e.attributes or {})) for e in span.events],
            "links": list(span.links), "resource": span.resource.attributes,
            "scope": (span.instrumentation_scope.name if span.instrumentation_scope else None),
            "dropped": (span.dropped_attributes, span.dropped_events, span.dropped_links),
            "parent_trace": span.parent.trace_id if span.parent else None,
            "json_keys": sorted(json.loads(span.to_json()))}


def test_a_span_exports_as_the_sdks_own_would() -> None:
    provider, exporter = pipeline()
    tracer = provider.get_tracer(SCOPE)
    parent = trace.set_span_in_context(trace.NonRecordingSpan(run_span_context("r")))
    attributes = {"hypha.run_id": "r", "hypha.attempt": 2, "hypha.queued": False}
    sink = sink_of(tracer)
    assert sink is not None
    for span in (tracer.start_span("hypha.node n", context=parent, attributes=dict(attributes)),
                 sink.start("hypha.node n", run_span_context("r").trace_id,
                            run_span_context("r"), dict(attributes))):
        span.set_attribute("app.rows", 3)
        span.add_event("fetched", {"n": 1})
        span.set_status(trace.Status(trace.StatusCode.ERROR, "ValueError"))
        span.end()
        span.end()  # a second end is ignored, as the SDK's
    sink.flush()
    sdk, ours = exporter.get_finished_spans()
    assert isinstance(ours.get_span_context(), trace.SpanContext)
    assert fields(ours) == fields(sdk)
    assert ours.context.trace_id == sdk.context.trace_id and ours.context.trace_flags.sampled
    assert ours.parent == sdk.parent
    assert sdk.start_time <= ours.start_time <= ours.end_time  # type: ignore[operator]


def test_user_code_in_a_node_adds_attributes_events_and_exceptions_to_its_span(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "8")
    provider, exporter = pipeline()
    tracing = TracingMiddleware(provider)
    step, attempt = Step("u1", "u1.0"), Attempt("u1", "u1.1", "fetch", 1)
    tracing.before_step(step)
    tracing.before_attempt(attempt)
    current = trace.get_current_span()
    assert isinstance(current, HyphaSpan) and isinstance(current, trace.Span)
    assert current.is_recording()
    current.set_attributes({f"app.{i}": i for i in range(20)})  # bounded: 8 kept
    current.set_attribute("app.tags", ["a", "b"])
    current.record_exception(KeyError("k"))
    current.update_name("hypha.node fetch (renamed)")
    tracing.after_attempt(attempt, AttemptEnd(True))
    tracing.after_step(step, None)
    assert not current.is_recording()
    current.set_attribute("app.late", 1)  # after the end: ignored
    provider.force_flush()
    node = next(s for s in exporter.get_finished_spans() if s.name.startswith("hypha.node"))
    assert node.name == "hypha.node fetch (renamed)"
    assert {k: v for k, v in node.attributes.items() if k.startswith("hypha.")} == {
        "hypha.run_id": "u1", "hypha.execution_id": "u1.1", "hypha.node": "fetch",
        "hypha.attempt": 1, "hypha.outcome": "ok"}
    users = {k for k in node.attributes if k.startswith("app.")}
    assert len(users) == 8 and "app.late" not in users
    [event] = node.events
    assert event.name == "exception" and event.attributes["exception.type"] == "KeyError"


def test_a_tracer_that_is_not_the_sdks_makes_its_own_spans() -> None:
    """Another API implementation (here the no-op one): its ``start_span`` is used, and
    every hook runs."""
    tracing = TracingMiddleware(trace.NoOpTracerProvider())
    assert tracing.sink is None
    step, attempt = Step("x", "x.0"), Attempt("x", "x.1", "n", 1)
    tracing.before_step(step)
    tracing.before_attempt(attempt)
    assert not isinstance(trace.get_current_span(), HyphaSpan)
    tracing.after_attempt(attempt, AttemptEnd(False, "ValueError"))
    tracing.after_step(step, None)
    tracing.after_run_end(RunEnd("x", "failed", "boom", graph_id="g"))


def node_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("hypha.node")]


def one_step(tracing: TracingMiddleware, run_id: str) -> None:
    step, attempt = Step(run_id, f"{run_id}.0"), Attempt(run_id, f"{run_id}.1", "n", 1)
    tracing.before_step(step)
    tracing.before_attempt(attempt)
    tracing.after_attempt(attempt, AttemptEnd(True))
    tracing.after_step(step, None)


def test_ended_spans_wait_then_the_sinks_thread_hands_them_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spans, "FLUSH_S", 2.0)  # room for a slow machine before the check
    provider, exporter = pipeline()
    tracing = TracingMiddleware(provider)
    one_step(tracing, "w1")
    assert exporter.get_finished_spans() == ()  # the step's ends only appended
    deadline = time.monotonic() + 10 * spans.FLUSH_S
    while len(exporter.get_finished_spans()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["hypha.node n",
                                                                      "hypha.step"]


def test_past_the_bound_the_ending_span_hands_over_what_waits(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(spans, "FLUSH_S", 60.0)  # the thread waits: only the bound acts
    monkeypatch.setattr(spans, "MAX_PENDING", 5)
    provider, exporter = pipeline()
    tracing = TracingMiddleware(provider)
    for i in range(2):
        one_step(tracing, f"b{i}")
    assert exporter.get_finished_spans() == ()  # 4 wait
    one_step(tracing, "b2")  # the 6th span to wait: all go
    assert len(exporter.get_finished_spans()) == 6
    assert tracing.sink is not None and not tracing.sink.pending
    assert tracing.sink.overflows == 1
    assert "more than 5 spans waited" in caplog.text  # once a minute at most
    # the logger docs/operations.md names
    assert {r.name for r in caplog.records} == {"hypha_celery.tracing._spans"}
    for i in range(3, 6):
        one_step(tracing, f"b{i}")
    assert tracing.sink.overflows == 2 and caplog.text.count("spans waited") == 1


def test_the_providers_shutdown_exports_what_waits_before_its_processors_stop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink's processor is first among the provider's (the SDK's private order of its
    multi-processor: this fails if that changes), so a batch processor still exports."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    monkeypatch.setattr(spans, "FLUSH_S", 60.0)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracing = TracingMiddleware(provider)
    one_step(tracing, "s1")
    provider.shutdown()
    assert [s.name for s in node_spans(exporter)] == ["hypha.node n"]


def test_force_flush_exports_what_waits_through_a_batch_processor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    monkeypatch.setattr(spans, "FLUSH_S", 60.0)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    tracing = TracingMiddleware(provider)
    one_step(tracing, "f1")
    assert provider.force_flush()
    assert len(node_spans(exporter)) == 1
    provider.shutdown()
