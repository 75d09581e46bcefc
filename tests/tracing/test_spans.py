"""``HyphaSpan``: hypha's spans are made by hand and handed to the SDK's span processor.
These tests fail when the SDK changes what a finished span is: each exported field is
compared with a span the SDK's own tracer made from the same inputs."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hypha_celery.middleware import Attempt, AttemptEnd, RunEnd, Step
from hypha_celery.tracing import TracingMiddleware, run_span_context
from hypha_celery.tracing.spans import SCOPE, HyphaSpan, sink_of


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
    for span in (tracer.start_span("hypha.node n", context=parent, attributes=dict(attributes)),
                 sink_of(tracer).start("hypha.node n", run_span_context("r").trace_id,  # type: ignore[union-attr]
                                       run_span_context("r"), dict(attributes))):
        span.set_attribute("app.rows", 3)
        span.add_event("fetched", {"n": 1})
        span.set_status(trace.Status(trace.StatusCode.ERROR, "ValueError"))
        span.end()
        span.end()  # a second end is ignored, as the SDK's
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
