"""Finished spans as JSON lines (with the exporting process's pid): the worker of the
cross-process test exports through :class:`JsonLines`, the test reads the file."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


def span_json(span: ReadableSpan) -> dict[str, object]:
    ctx, parent = span.get_span_context(), span.parent
    return {"name": span.name, "trace_id": f"{ctx.trace_id:032x}",
            "span_id": f"{ctx.span_id:016x}",
            "parent_id": f"{parent.span_id:016x}" if parent else None,
            "attributes": dict(span.attributes or {}), "pid": os.getpid(),
            "start": span.start_time, "end": span.end_time}


class JsonLines(SpanExporter):
    """Each span as one appended line (one write: the prefork children share the file)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        text = "".join(json.dumps(span_json(s)) + "\n" for s in spans)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(text)
        return SpanExportResult.SUCCESS
