"""Spans made by hand for the SDK's span processors: what keeps tracing cheap per step.

The SDK's ``Tracer.start_span`` and ``Span.end`` cost ~20 µs a span (a sampler asked per
span, attributes cleaned into a locked bounded mapping, the span copied into a
``ReadableSpan`` at its end); a traced step makes two. Hypha decides sampling once per
run (:mod:`~hypha_celery.tracing.middleware`) and its own attributes are strings, ints
and bools, so a span here is an :class:`HyphaSpan`, an OpenTelemetry API ``Span`` that
keeps what it is told and, at its end, hands one SDK ``ReadableSpan`` to the tracer's
span processor (~3.5 µs a span). Exporters and processors see the same object as from the
SDK's tracer: name, context, parent, kind, status, times, attributes, events, the
provider's resource, the ``hypha_celery`` instrumentation scope.

What it does not do, unlike the SDK's tracer (the trade-off): the span processors'
``on_start`` is not called (the batch and simple processors do nothing there), the
tracer's own sampler is not asked per span (the run's decision stands for all of its
spans), and the span limits are OpenTelemetry's defaults or its ``OTEL_*`` environment
variables, not a ``span_limits`` given to the provider. Attributes and events added by
user code (``trace.get_current_span().set_attribute(...)`` inside a node) are cleaned and
bounded as the SDK does. A tracer that is not the SDK's (no ``span_processor``) gets its
spans from its own ``start_span``: :func:`sink_of` returns ``None``."""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

from hypha_celery.tracing.client import otel_trace

#: The instrumentation scope of hypha's spans.
SCOPE = "hypha_celery"


class SpanSink:
    """Where finished spans go: the SDK tracer's span processor, with its resource."""

    def __init__(self, processor: Any, resource: Any, ids: Any) -> None:
        from opentelemetry.sdk.trace import ReadableSpan, SpanLimits
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.processor = processor
        self.resource = resource
        self.ids = ids
        self.readable = ReadableSpan
        self.limits = SpanLimits()
        self.scope = InstrumentationScope(SCOPE)
        trace = otel_trace()
        self.trace = trace
        self.sampled = trace.TraceFlags(trace.TraceFlags.SAMPLED)
        self.unset = trace.Status(trace.StatusCode.UNSET)
        register()

    def start(self, name: str, trace_id: int, parent: Any, attributes: dict[str, Any],
              span_id: int | None = None, start_time: int | None = None) -> HyphaSpan:
        """A recording span in trace ``trace_id`` under ``parent`` (a ``SpanContext``, or
        ``None``: a root), its id ``span_id`` or the tracer's id generator's."""
        return HyphaSpan(self, name, self.context(trace_id, span_id), parent, attributes,
                         start_time)

    def context(self, trace_id: int, span_id: int | None) -> Any:
        span_id = span_id if span_id is not None else int(self.ids.generate_span_id())
        return self.trace.SpanContext(trace_id, span_id, is_remote=False,
                                      trace_flags=self.sampled)


def sink_of(tracer: Any) -> SpanSink | None:
    """The sink of an SDK tracer (its ``span_processor``, ``resource`` and
    ``id_generator``), else ``None``."""
    processor = getattr(tracer, "span_processor", None)
    resource = getattr(tracer, "resource", None)
    ids = getattr(tracer, "id_generator", None)
    if processor is None or resource is None or ids is None:
        return None
    return SpanSink(processor, resource, ids)


class HyphaSpan:
    """An OpenTelemetry API span (it is registered as one) that becomes an SDK
    ``ReadableSpan`` when it ends. Not thread-safe beyond what the SDK promises for a
    span's owner: a lock guards its end only."""

    __slots__ = ("_attributes", "_context", "_end_lock", "_ended", "_events", "_name",
                 "_parent", "_sink", "_start", "_status", "_user")

    def __init__(self, sink: SpanSink, name: str, context: Any, parent: Any,
                 attributes: dict[str, Any], start_time: int | None) -> None:
        self._sink = sink
        self._name = name
        self._context = context
        self._parent = parent
        self._attributes = attributes
        self._user: Any = None  # attributes from user code, bounded as the SDK bounds them
        self._events: Any = None
        self._status = sink.unset
        self._start = start_time if start_time is not None else time.time_ns()
        self._ended = False
        self._end_lock = threading.Lock()

    # what hypha sets: its own attributes, already clean
    def note(self, attributes: dict[str, Any]) -> None:
        self._attributes.update(attributes)

    # the API
    def get_span_context(self) -> Any:
        return self._context

    def is_recording(self) -> bool:
        return not self._ended

    def set_attribute(self, key: str, value: Any) -> None:
        if self._ended:
            return
        if self._user is None:
            from opentelemetry.attributes import BoundedAttributes

            limits = self._sink.limits
            self._user = BoundedAttributes(limits.max_span_attributes, immutable=False,
                                           max_value_len=limits.max_span_attribute_length)
        self._user[key] = value

    def set_attributes(self, attributes: Any) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(self, name: str, attributes: Any = None,
                  timestamp: int | None = None) -> None:
        if self._ended:
            return
        from opentelemetry.attributes import BoundedAttributes
        from opentelemetry.sdk.trace import Event
        from opentelemetry.sdk.util import BoundedList

        limits = self._sink.limits
        if self._events is None:
            self._events = BoundedList(limits.max_events)
        bounded = BoundedAttributes(limits.max_event_attributes, attributes, immutable=True,
                                    max_value_len=limits.max_attribute_length)
        self._events.append(Event(name, bounded, timestamp))

    def add_link(self, context: Any, attributes: Any = None) -> None:
        """Links are not kept on hypha's spans (they have none of their own)."""

    def update_name(self, name: str) -> None:
        if not self._ended:
            self._name = name

    def set_status(self, status: Any, description: str | None = None) -> None:
        if self._ended:
            return
        trace = self._sink.trace
        if not isinstance(status, trace.Status):
            status = trace.Status(status, description)
        if status.status_code is trace.StatusCode.UNSET:
            return
        if self._status.status_code is not trace.StatusCode.OK:
            self._status = status

    def record_exception(self, exception: BaseException, attributes: Any = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        kind = type(exception)
        module = kind.__module__
        recorded: dict[str, Any] = {
            "exception.type": (f"{module}.{kind.__qualname__}"
                               if module and module != "builtins" else kind.__qualname__),
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped)}
        recorded.update(attributes or {})
        self.add_event("exception", recorded, timestamp)

    def end(self, end_time: int | None = None) -> None:
        with self._end_lock:
            if self._ended:
                return
            self._ended = True
        attributes = self._attributes
        if self._user is not None:
            attributes = {**self._user, **attributes}
        sink = self._sink
        sink.processor.on_end(sink.readable(
            self._name, self._context, self._parent, sink.resource, attributes,
            self._events or (), (), status=self._status, start_time=self._start,
            end_time=end_time if end_time is not None else time.time_ns(),
            instrumentation_scope=sink.scope))

    def __enter__(self) -> HyphaSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()


_REGISTERED = False


def register() -> None:
    """Make :class:`HyphaSpan` an OpenTelemetry API ``Span`` (``isinstance`` holds, as
    ``trace.use_span`` and instrumentations check) without inheriting its ``__init__``."""
    global _REGISTERED
    if not _REGISTERED:
        otel_trace().Span.register(HyphaSpan)
        _REGISTERED = True
