"""OpenTelemetry tracing (the ``tracing`` extra: ``pip install 'hypha-celery[tracing]'``).

``TracingMiddleware`` makes one trace per run, across the client and every worker
process::

    tracing = TracingMiddleware()          # the global TracerProvider, or pass one
    hypha = Hypha(settings, middleware=[tracing])

Spans: ``hypha.run <graph>`` (the root), ``hypha.admit`` (the run admitted, or queued),
``hypha.step`` (a coordinator step), ``hypha.node <node>`` (a node attempt),
``hypha.call <model or tool>`` (a model or tool call the node made through its context).
Their attributes are ids, names, attempts, status or reason, token counts and error types,
never input, state, prompts or outputs. See :class:`TracingMiddleware` for
how the processes share a trace. opentelemetry is imported only when used."""

from __future__ import annotations

from hypha_celery.tracing._middleware import TracingMiddleware, run_span_context

__all__ = ["TracingMiddleware", "run_span_context"]
