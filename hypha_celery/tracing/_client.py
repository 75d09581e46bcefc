"""The optional OpenTelemetry imports, with the extra to install when they are missing."""

from __future__ import annotations

from types import ModuleType

from hypha_celery.errors import ExtraNotInstalled

INSTALL_HINT = "pip install 'hypha-celery[tracing]'"


def otel_trace() -> ModuleType:
    """``opentelemetry.trace``, imported on first use; ``ExtraNotInstalled`` without it."""
    try:
        import opentelemetry.trace
    except ImportError as exc:
        raise ExtraNotInstalled(
            f"OpenTelemetry tracing needs opentelemetry-api: {INSTALL_HINT}") from exc
    return opentelemetry.trace


def otel_context() -> ModuleType:
    otel_trace()
    import opentelemetry.context

    return opentelemetry.context


def tracecontext() -> ModuleType:
    """The W3C ``traceparent`` propagator's module."""
    otel_trace()
    import opentelemetry.trace.propagation.tracecontext

    return opentelemetry.trace.propagation.tracecontext
