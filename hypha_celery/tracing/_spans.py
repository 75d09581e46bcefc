"""Spans made by hand for the SDK's span processors: what keeps tracing cheap per step.

The SDK's ``Tracer.start_span`` and ``Span.end`` cost ~20 µs a span (a sampler asked per
span, attributes cleaned into a locked bounded mapping, the span copied into a
``ReadableSpan`` at its end); a traced step makes two. Hypha decides sampling once per
run (:class:`~hypha_celery.tracing.TracingMiddleware`) and its own attributes are strings, ints
and bools, so a span here is an :class:`HyphaSpan`, an OpenTelemetry API ``Span`` that
keeps what it is told and, at its end, hands one SDK ``ReadableSpan`` to the tracer's
span processor (~3.5 µs a span). Exporters and processors see the same object as from the
SDK's tracer: name, context, parent, kind, status, times, attributes, events, the
provider's resource, the ``hypha_celery`` instrumentation scope.

A span's end costs a step only an append: finished spans wait in the sink (at most
:data:`MAX_PENDING` a process) and a daemon thread of the sink hands them to the processor
every :data:`FLUSH_S` seconds, in chunks of :data:`CHUNK` with the interpreter lock let go
between chunks, so the work falls in the worker's waits on the broker and the store. When
more than :data:`MAX_PENDING` wait, the span that ends hands them over itself (nothing is
dropped here; ``SpanSink.overflows`` counts it, and a warning says so once a minute at
most; ``len(sink.pending)`` is what waits). ``provider.force_flush()`` hands over what
waits first (the sink adds a span processor of its own to the provider for it), and so
does the process's exit
(``atexit``, registered after the provider's, so it runs before the provider's shutdown).
A prefork child starts its own thread (the fork hook,
:func:`~hypha_celery.middleware.on_fork`).

What it does not do, unlike the SDK's tracer (the trade-off): spans reach the processors
up to :data:`FLUSH_S` after they end; the span processors' ``on_start`` is not called
(the batch and simple processors do nothing there); the tracer's own sampler is not asked
per span (the run's decision stands for all of its spans); the span limits are
OpenTelemetry's defaults or its ``OTEL_*`` environment variables, not a ``span_limits``
given to the provider. Attributes and events added by user code
(``trace.get_current_span().set_attribute(...)`` inside a node) are cleaned and bounded
as the SDK does. A tracer that is not the SDK's (no ``span_processor``) gets its spans
from its own ``start_span``: :func:`sink_of` returns ``None``."""

from __future__ import annotations

import atexit
import logging
import threading
import time
import traceback
import weakref
from collections import deque
from typing import Any

from hypha_celery._private_api import put_span_processor_first
from hypha_celery.middleware._process import on_fork
from hypha_celery.tracing._client import otel_context, otel_trace

log = logging.getLogger(__name__)

#: The instrumentation scope of hypha's spans.
SCOPE = "hypha_celery"
#: Seconds a finished span waits at most before the sink's thread hands it over.
FLUSH_S = 0.5
#: Finished spans a process keeps waiting at most; past it the ending span hands them over.
MAX_PENDING = 2048
#: Spans handed over between two releases of the interpreter lock by the sink's thread.
CHUNK = 16


class SpanSink:
    """Where finished spans go: the SDK tracer's span processor, with its resource; the
    finished spans waiting for it, and the thread that hands them over."""

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
        self.pending: deque[HyphaSpan] = deque()
        self.overflows = 0  # times more than MAX_PENDING waited
        self.warned = -60.0
        self._fresh()
        on_fork(self._fresh)
        atexit.register(_call, weakref.ref(self), "flush")

    def _fresh(self) -> None:
        """No thread yet, nothing waiting (at start, and in a forked child: the parent's
        spans are the parent's to hand over)."""
        self.pending.clear()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, name: str, trace_id: int, parent: Any, attributes: dict[str, Any],
              span_id: int | None = None, start_time: int | None = None) -> HyphaSpan:
        """A recording span in trace ``trace_id`` under ``parent`` (a ``SpanContext``, a
        :class:`HyphaSpan`, or ``None``: a root), its id ``span_id`` or the tracer's id
        generator's."""
        span_id = span_id if span_id is not None else self.ids.generate_span_id()
        return HyphaSpan(self, name, trace_id, span_id, parent, attributes, start_time)

    @staticmethod
    def note(span: HyphaSpan, attributes: dict[str, Any]) -> None:
        """Hypha's own attributes on a span of its own (already clean)."""
        span.note(attributes)

    def finished(self, span: HyphaSpan) -> None:
        """A span ended: it waits for the thread (or is handed over now, with the others
        waiting, when too many wait)."""
        self.pending.append(span)
        if self.thread is None:
            self._start_thread()
        if len(self.pending) > MAX_PENDING:
            self._overflowed()
            self.flush()

    def _overflowed(self) -> None:
        """Counted (:attr:`overflows`) and logged, once a minute at most."""
        self.overflows += 1
        now = time.monotonic()
        if now - self.warned >= 60:
            self.warned = now
            log.warning("tracing: more than %d spans waited for the hand-over thread "
                        "(%d times so far): the ending span handed them over itself",
                        MAX_PENDING, self.overflows)

    def flush(self, chunk: int = 0) -> None:
        """Hand every waiting span to the processor (``chunk``: let go of the interpreter
        lock after each ``chunk`` of them)."""
        with self.lock:
            done = 0
            while True:
                try:
                    span = self.pending.popleft()
                except IndexError:
                    return
                self.processor.on_end(span.readable())
                done += 1
                if chunk and done % chunk == 0:
                    time.sleep(0)

    def _start_thread(self) -> None:
        with self.lock:
            if self.thread is not None:
                return
            this = weakref.ref(self)
            self.thread = threading.Thread(target=_hand_over, args=(this, self.wake),
                                           name="hypha-spans", daemon=True)
            self.thread.start()


def _call(sink: weakref.ref[SpanSink], method: str) -> None:
    alive = sink()
    if alive is not None:
        getattr(alive, method)()


def _hand_over(sink: weakref.ref[SpanSink], wake: threading.Event) -> None:
    """The sink's thread: every :data:`FLUSH_S`, what waits goes to the processor; it ends
    with the sink."""
    while True:
        wake.wait(FLUSH_S)
        alive = sink()
        if alive is None or alive.wake is not wake:
            return
        alive.flush(CHUNK)
        del alive


def processor_for(sink: SpanSink) -> Any:
    """A span processor for the provider that hands over the sink's waiting spans on
    ``force_flush`` and ``shutdown`` (it does nothing with a span), then flushes the
    provider's processors again so they export them."""
    from opentelemetry.sdk.trace import SpanProcessor

    class HandOver(SpanProcessor):
        def __init__(self) -> None:
            self.sink = weakref.ref(sink)
            self.local = threading.local()

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            alive = self.sink()
            if alive is None or getattr(self.local, "busy", False) or not alive.pending:
                return True
            self.local.busy = True
            try:
                alive.flush()
                return bool(alive.processor.force_flush(timeout_millis))
            finally:
                self.local.busy = False

        def shutdown(self) -> None:
            alive = self.sink()
            if alive is not None:
                alive.flush()

    return HandOver()


def add_first(provider: Any, processor: Any) -> None:
    """Add ``processor`` to the provider's processors, first among them: the provider
    shuts its processors down in order, and what waits must be handed over before the
    exporting ones stop. The order is the SDK's private ``_span_processors`` tuple of
    its multi-processor (:func:`~hypha_celery._private_api.put_span_processor_first`;
    ``tests/test_private_api.py`` fails if that changes); without
    it the processor stays last, and ``provider.shutdown()`` loses what waits unless
    ``force_flush()`` came first."""
    provider.add_span_processor(processor)
    put_span_processor_first(provider, processor)


class TracerSpans:
    """Spans from a tracer that is not the SDK's, through its own ``start_span``, with
    :class:`SpanSink`'s ``start`` and ``note`` (a root gets the tracer's random ids)."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self.trace = otel_trace()
        self.context = otel_context()

    def start(self, name: str, trace_id: int, parent: Any, attributes: dict[str, Any],
              span_id: int | None = None, start_time: int | None = None) -> Any:
        if parent is None:
            under = self.context.Context()
        else:
            if not isinstance(parent, self.trace.SpanContext):
                parent = parent.get_span_context()
            under = self.trace.set_span_in_context(self.trace.NonRecordingSpan(parent))
        return self.tracer.start_span(name, context=under, attributes=attributes,
                                      start_time=start_time)

    @staticmethod
    def note(span: Any, attributes: dict[str, Any]) -> None:
        span.set_attributes(attributes)


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
    ``ReadableSpan`` after it ends. Meant for the thread that started it (two threads
    ending it at once may hand it over twice)."""

    __slots__ = ("_attributes", "_context", "_end", "_events", "_name", "_parent",
                 "_sink", "_start", "_status", "_user", "span_id", "trace_id")

    def __init__(self, sink: SpanSink, name: str, trace_id: int, span_id: int, parent: Any,
                 attributes: dict[str, Any], start_time: int | None) -> None:
        self._sink = sink
        self._name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self._context: Any = None  # its SpanContext, made when first asked for
        self._parent = parent  # a SpanContext, or the parent's HyphaSpan
        self._attributes = attributes
        self._user: Any = None  # attributes from user code, bounded as the SDK bounds them
        self._events: Any = None
        self._status = sink.unset
        self._start = start_time if start_time is not None else time.time_ns()
        self._end: int | None = None

    # what hypha sets: its own attributes, already clean
    def note(self, attributes: dict[str, Any]) -> None:
        self._attributes.update(attributes)

    # the API
    def get_span_context(self) -> Any:
        if self._context is None:
            self._context = self._sink.trace.SpanContext(
                self.trace_id, self.span_id, is_remote=False, trace_flags=self._sink.sampled)
        return self._context

    def is_recording(self) -> bool:
        return self._end is None

    def set_attribute(self, key: str, value: Any) -> None:
        if self._end is not None:
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
        if self._end is not None:
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
        if self._end is None:
            self._name = name

    def set_status(self, status: Any, description: str | None = None) -> None:
        if self._end is not None:
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
        """Ended (a second end is ignored): it waits in the sink for the processor."""
        if self._end is not None:
            return
        self._end = end_time if end_time is not None else time.time_ns()
        self._sink.finished(self)

    def readable(self) -> Any:
        """The SDK's ``ReadableSpan`` of this ended span, as exporters read it."""
        attributes = self._attributes
        if self._user is not None:
            attributes = {**self._user, **attributes}
        sink = self._sink
        parent = self._parent
        if isinstance(parent, HyphaSpan):
            parent = parent.get_span_context()
        return sink.readable(
            self._name, self.get_span_context(), parent, sink.resource, attributes,
            self._events or (), (), status=self._status, start_time=self._start,
            end_time=self._end, instrumentation_scope=sink.scope)

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
