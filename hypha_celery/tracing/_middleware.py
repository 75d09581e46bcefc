"""``TracingMiddleware``: OpenTelemetry spans from the middleware hooks.

One trace per run across processes: the run's trace id and the span id of its root span
``hypha.run <graph>`` are derived from the run id (:func:`run_span_context`: sha256 of
the run id), so any process (the client that admits the run, the workers that step it
and run its nodes, at any time) makes its spans children of the run without being told
anything. The root span is exported by the process that commits the run's terminal event
(status and reason on it), from the run's admission: each message of the run carries the
earliest start its publisher knows in a ``hypha_run_start`` header. The context of the
step a task just ran travels in the Celery message headers of what it publishes (the
nodes it decided) as a W3C ``traceparent`` (the ``before_publish`` hook), so a
node's span is the child of the step that decided it (a node run locally, zero-hop, by
the task of its step: that step), else of the run.

Spans: ``hypha.admit`` (``after_run_start``: admitted or queued), ``hypha.step``
(``before_step`` / ``after_step``), ``hypha.node <node>`` (``before_attempt`` /
``after_attempt``), ``hypha.call <model or tool>`` (``before_call`` / ``after_call``: a
model or tool call the node made through ``ctx.model``, ``ctx.llm`` or ``ctx.tool``, the
child of the node's span: it runs in the node's thread), ``hypha.run <graph>``
(``after_run_end``). Attributes are ids, names, attempts, status, reasons, token counts
and error type names only: never a prompt, an input, an output or the state.

Sampling is the provider's sampler's, decided once per run as for its root span (no
parent, the run's trace id): with ``ParentBased(TraceIdRatioBased(r))`` every process
makes the same decision, so a run is traced whole or not at all, and the hooks of a run
left out return at once (what makes tracing cheap at a ratio below 1)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from functools import lru_cache
from typing import Any

from celery import current_task

from hypha_celery.middleware import (
    Attempt,
    AttemptEnd,
    Call,
    CallEnd,
    Middleware,
    Publish,
    RunEnd,
    RunStart,
    Step,
)
from hypha_celery.tracing._client import otel_context, otel_trace, tracecontext
from hypha_celery.tracing._spans import SCOPE, TracerSpans, add_first, processor_for, sink_of

#: Runs whose first sighting this process remembers (for the root span's start).
MAX_REMEMBERED = 10_000
HEADER = "traceparent"
#: ``<run id> <ns>``: when the run began, as far as the publishing process knows (the
#: root span starts there, in whichever process ends the run).
START_HEADER = "hypha_run_start"


#: Runs whose ids and contexts a process keeps at hand (a step, a node and each call of a
#: run ask for them: hashing once per run keeps the hooks cheap).
CACHED_RUNS = 1024


@lru_cache(maxsize=CACHED_RUNS)
def run_ids(run_id: str) -> tuple[int, int]:
    """The run's trace id (128 bits) and its root span's id (64 bits), never zero."""
    digest = hashlib.sha256(run_id.encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


@lru_cache(maxsize=CACHED_RUNS)
def run_span_context(run_id: str) -> Any:
    """The :class:`~opentelemetry.trace.SpanContext` of the run's root span (sampled)."""
    trace = otel_trace()
    trace_id, span_id = run_ids(run_id)
    return trace.SpanContext(trace_id, span_id, is_remote=True,
                             trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))


@lru_cache(maxsize=CACHED_RUNS)
def _sampled(sampler: Any, run_id: str) -> bool:
    """Whether ``sampler`` keeps the run's trace, decided as for its root span (no parent,
    the run's trace id): the same answer in every process, so a run is traced whole or
    not at all. No sampler (another API's tracer): kept."""
    if sampler is None:
        return True
    result = sampler.should_sample(None, run_ids(run_id)[0], "hypha.run")
    return bool(result.decision.is_sampled())


#: The coordinator step last run by this thread: (the Celery task it ran in, the step's
#: span). The nodes it decided are published (or run locally) after the step returns.
_STEP = threading.local()


def _task_request() -> Any:
    """The request of the Celery task being executed (``None``: none is). Asked once per
    hook: ``celery.current_task``'s proxy costs more than the rest of a hook's lookups."""
    return getattr(current_task, "request", None)


def _task_id(request: Any) -> str | None:
    return getattr(request, "id", None) if request is not None else None


def _last_step(request: Any) -> Any:
    """The span of the step this thread ran in the current task, else ``None``."""
    last = getattr(_STEP, "last", None)
    if last is None or last[0] != _task_id(request):
        return None
    return last[1]


#: The run this thread last worked on: (run id, its start in ns as far as known).
_RUN = threading.local()


def _trace_id(span: Any) -> int:
    """A span's trace id (ours have it at hand: no ``SpanContext`` made for it)."""
    trace_id = getattr(span, "trace_id", None)
    return int(trace_id if trace_id is not None else span.get_span_context().trace_id)


def _task_header(request: Any, name: str) -> str | None:
    """A header of the Celery task being executed, if any."""
    if request is None:
        return None
    value = vars(request).get(name)  # a custom header is an attribute of the request
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(name)
    return value if isinstance(value, str) else None


def _header_start(request: Any, run_id: str) -> int | None:
    """The run's start from the task's headers (``None``: not told, or another run's)."""
    value = _task_header(request, START_HEADER)
    if not value:
        return None
    sent_run, _, ns = value.partition(" ")
    return int(ns) if sent_run == run_id and ns.isdigit() else None


class TracingMiddleware(Middleware):
    """Spans for runs, coordinator steps, node attempts and their model and tool calls in
    ``tracer_provider``
    (default: OpenTelemetry's global one, which must be set before: the tracer is taken
    once). With the SDK's tracer the spans are made here (:mod:`~hypha_celery.tracing._spans`,
    the root with the run's ids) and handed to its span processor; another API's tracer
    makes its own."""

    def __init__(self, tracer_provider: Any = None) -> None:
        trace = otel_trace()
        self.trace = trace
        self.context = otel_context()
        provider = trace.get_tracer_provider() if tracer_provider is None else tracer_provider
        self.tracer = provider.get_tracer(SCOPE)
        # the SDK's tracer: spans made here, handed to its processor (another API: its own,
        # the root with random ids)
        self.sink = sink_of(self.tracer)
        if self.sink is not None and hasattr(provider, "add_span_processor"):
            add_first(provider, processor_for(self.sink))  # force_flush hands over
        self.spans = self.sink if self.sink is not None else TracerSpans(self.tracer)
        self.sampler = getattr(provider, "sampler", None)
        self.local = threading.local()
        self.lock = threading.Lock()
        self.first_seen: OrderedDict[str, int] = OrderedDict()

    # bookkeeping
    def _seen(self, run_id: str, request: Any) -> None:
        """Remember when the run began (now, or earlier as a header tells), and that this
        thread works on it (its later publishes carry the start). Once per run and task
        in a thread: the task's header does not change, and now is later than then."""
        key = (run_id, _task_id(request))
        run: tuple[str, int] | None = getattr(_RUN, "current", None)
        same_run = run is not None and run[0] == run_id
        if same_run and getattr(self.local, "seen", None) == key:
            return
        told = _header_start(request, run_id)
        if (same_run and run is not None and (told is None or told >= run[1])
                and run_id in self.first_seen):
            self.local.seen = key  # nothing earlier to remember: no lock
            return
        now = time.time_ns()
        with self.lock:
            start = min(self.first_seen.get(run_id, now), told or now)
            self.first_seen[run_id] = start
            while len(self.first_seen) > MAX_REMEMBERED:
                self.first_seen.popitem(last=False)
        _RUN.current = (run_id, start)
        self.local.seen = key

    def _open(self) -> dict[tuple[str, ...], list[tuple[Any, object]]]:
        spans = getattr(self.local, "spans", None)
        if spans is None:
            spans = self.local.spans = {}
        return spans

    def _span(self, name: str, parent: Any, attributes: dict[str, Any]) -> Any:
        """A started span under ``parent`` (a ``SpanContext``, or a span of ours)."""
        return self.spans.start(name, _trace_id(parent), parent, attributes)

    def _start(self, key: tuple[str, ...], name: str, parent: Any,
               attributes: dict[str, Any]) -> Any:
        """Start a span under ``parent`` (a ``SpanContext``) and make it current; returns
        the span."""
        span = self._span(name, parent, attributes)
        token = self.context.attach(self.trace.set_span_in_context(span))
        self._open().setdefault(key, []).append((span, token))
        return span

    def _end(self, key: tuple[str, ...], error: str | None,
             attributes: dict[str, Any] | None = None) -> None:
        spans = self._open()
        stack = spans.get(key)
        if not stack:
            return
        span, token = stack.pop()
        if not stack:
            del spans[key]
        if error is not None:
            attributes = {**(attributes or {}), "hypha.error_type": error}
        if attributes:
            self.spans.note(span, attributes)
        if error is not None:
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, error))
        try:
            self.context.detach(token)
        finally:
            span.end()

    def _traced(self, run_id: str) -> bool:
        """The provider's sampler keeps this run (once per run; an unsampled run's hooks
        return at once: it costs a cache lookup a hook)."""
        return _sampled(self.sampler, run_id)

    # hooks
    def before_publish(self, message: Publish) -> None:
        """The ``traceparent`` of the step this task just ran, and the start of the run
        this thread works on, in the headers of a message it publishes."""
        headers = message.headers
        run = getattr(_RUN, "current", None)
        if run is not None:
            headers[START_HEADER] = f"{run[0]} {run[1]}"
        step = _last_step(_task_request())
        if step is None:
            return
        context = otel_trace().set_span_in_context(step)
        tracecontext().TraceContextTextMapPropagator().inject(headers, context=context)

    def after_run_start(self, run: RunStart) -> None:
        if not self._traced(run.run_id):
            return
        self._seen(run.run_id, _task_request())
        self._span("hypha.admit", run_span_context(run.run_id),
                   {"hypha.run_id": run.run_id, "hypha.graph": run.graph_id,
                    "hypha.queued": run.queued}).end()

    def after_run_end(self, run: RunEnd) -> None:
        if not self._traced(run.run_id):
            return
        with self.lock:
            start = self.first_seen.pop(run.run_id, None)
        attributes: dict[str, Any] = {"hypha.run_id": run.run_id, "hypha.graph": run.graph_id,
                                      "hypha.status": run.status}
        if run.reason:
            attributes["hypha.reason"] = run.reason
        trace_id, span_id = run_ids(run.run_id)  # the root: the run's ids
        span = self.spans.start(f"hypha.run {run.graph_id}".rstrip(), trace_id, None,
                                attributes, span_id=span_id, start_time=start)
        if run.status == "failed":
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR,
                                              run.reason or "failed"))
        span.end()

    def before_step(self, step: Step) -> None:
        if not self._traced(step.run_id):
            return
        request = _task_request()
        self._seen(step.run_id, request)
        span = self._start(("step", step.run_id, step.execution_id), "hypha.step",
                           run_span_context(step.run_id),
                          {"hypha.run_id": step.run_id,
                           "hypha.execution_id": step.execution_id})
        _STEP.last = (_task_id(request), span)

    def after_step(self, step: Step, error: BaseException | None) -> None:
        if not self._traced(step.run_id):
            return
        self._end(("step", step.run_id, step.execution_id),
                  None if error is None else type(error).__name__)

    def _node_parent(self, run_id: str, request: Any) -> Any:
        """The step that decided this node: the one this task just ran (a local step),
        else the one that published it (its ``traceparent``), else the run."""
        trace_id = run_ids(run_id)[0]
        step = _last_step(request)
        if step is not None and _trace_id(step) == trace_id:
            return step
        header = _task_header(request, HEADER)
        if header:
            ctx = tracecontext().TraceContextTextMapPropagator().extract({HEADER: header})
            sent = self.trace.get_current_span(ctx).get_span_context()
            if sent.is_valid and sent.trace_id == trace_id:
                return sent
        return run_span_context(run_id)

    def before_attempt(self, attempt: Attempt) -> None:
        if not self._traced(attempt.run_id):
            return
        request = _task_request()
        self._seen(attempt.run_id, request)
        self._start(("node", attempt.run_id, attempt.execution_id, str(attempt.attempt)),
                    f"hypha.node {attempt.node}", self._node_parent(attempt.run_id, request),
                    {"hypha.run_id": attempt.run_id,
                     "hypha.execution_id": attempt.execution_id,
                     "hypha.node": attempt.node, "hypha.attempt": attempt.attempt})

    def after_attempt(self, attempt: Attempt, end: AttemptEnd) -> None:
        if not self._traced(attempt.run_id):
            return
        outcome = "ok" if end.ok else ("stale" if end.error_type == "Stale" else "error")
        self._end(("node", attempt.run_id, attempt.execution_id, str(attempt.attempt)),
                  None if end.ok or outcome == "stale" else (end.error_type or "error"),
                  {"hypha.outcome": outcome})

    def _call_parent(self, run_id: str) -> Any:
        """The current span (the node's: a call runs in the node's thread) when it is the
        run's, else the run (a call made from a thread the node started)."""
        current = self.trace.get_current_span().get_span_context()
        if current.is_valid and current.trace_id == run_ids(run_id)[0]:
            return current
        return run_span_context(run_id)

    def before_call(self, call: Call) -> None:
        if not self._traced(call.run_id):
            return
        self._start(("call", call.run_id, call.call_id), f"hypha.call {call.name}",
                    self._call_parent(call.run_id),
                    {"hypha.run_id": call.run_id, "hypha.execution_id": call.execution_id,
                     "hypha.node": call.node_id, "hypha.call.kind": call.kind,
                     "hypha.call.name": call.name, "hypha.call.id": call.call_id})

    def after_call(self, call: Call, end: CallEnd) -> None:
        if not self._traced(call.run_id):
            return
        tokens = {f"hypha.call.{key}": value for key, value in (
            ("input_tokens", end.input_tokens), ("output_tokens", end.output_tokens),
            ("cache_read_tokens", end.cache_read_tokens),
            ("cache_write_tokens", end.cache_write_tokens)) if value is not None}
        self._end(("call", call.run_id, call.call_id), end.error_type, tokens)
