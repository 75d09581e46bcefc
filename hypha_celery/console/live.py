"""Live timeline rows over server-sent events: ``GET /runs/{id}/live?after=SEQ``.

The stream polls the store (every :data:`POLL_SECONDS`) for the run's events after
``SEQ`` and sends each as an ``event: row`` whose data is the row's HTML; when the run
ends, or is held (parked, quarantined, waiting for a review), it sends ``event: end``
and closes, and the page reloads to show where the run is. Polling the store, not a
bus, keeps it right across processes and restarts. Bounds: :data:`MAX_STREAMS` streams
at once per console (past it, 503), each at most :data:`MAX_STREAM_SECONDS`; a comment
line every :data:`HEARTBEAT_SECONDS` keeps proxies from closing an idle stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from hypha_celery.console.filters import BadQuery
from hypha_celery.console.pages import run_id_of
from hypha_celery.errors import RunNotFound
from hypha_celery.events import TERMINAL_KINDS, Event
from hypha_celery.projections.timeline import TimelineRow, rows

if TYPE_CHECKING:
    from hypha_celery.client.scoped import ScopedHypha
    from hypha_celery.console.app import Console

__all__ = ["HEARTBEAT_SECONDS", "MAX_STREAMS", "MAX_STREAM_SECONDS", "POLL_SECONDS",
           "live_rows"]

#: Events after which the page reloads: the run ended, or is held for a person.
_ENDS = TERMINAL_KINDS | {"run.parked", "run.quarantined", "run.waiting_human"}
POLL_SECONDS = 0.25
HEARTBEAT_SECONDS = 15.0
MAX_STREAMS = 32
MAX_STREAM_SECONDS = 3600.0


def _message(kind: str, data: str) -> str:
    lines = "".join(f"data: {line}\n" for line in data.splitlines() or [""])
    return f"event: {kind}\n{lines}\n"


class _Streams:
    def __init__(self) -> None:
        self.open = 0


def live_rows(console: Console) -> Callable[[Request], Any]:
    streams = _Streams()
    template = console.templates.get_template("_row.html")

    def render(row: TimelineRow, t0: float) -> str:
        return " ".join(template.render(row=row, t0=t0).split())

    async def stream(hypha: ScopedHypha, run_id: str, after: int, t0: float
                     ) -> AsyncIterator[str]:
        streams.open += 1
        try:
            deadline, beat = time.monotonic() + MAX_STREAM_SECONDS, time.monotonic()
            while time.monotonic() < deadline:
                batch: list[Event] = await run_in_threadpool(hypha.store.events, run_id, after)
                for row in rows(batch):
                    yield _message("row", render(row, t0))
                    after = row.event.seq
                if any(e.type in _ENDS for e in batch):
                    yield _message("end", str(after))
                    return
                if time.monotonic() - beat > HEARTBEAT_SECONDS:
                    beat = time.monotonic()
                    yield ": alive\n\n"
                await asyncio.sleep(POLL_SECONDS)
        finally:
            streams.open -= 1

    async def endpoint(request: Request) -> Response:
        hypha = await run_in_threadpool(console.scoped, request)
        run_id = run_id_of(request)
        after = request.query_params.get("after", "0")
        if not after.isdigit() or len(after) > 18:
            raise BadQuery("after", "not a whole number")
        first = await run_in_threadpool(hypha.store.events, run_id, 0, 1)
        if not first:
            raise RunNotFound(f"no run {run_id!r} in the event store")
        if streams.open >= MAX_STREAMS:
            return PlainTextResponse("too many live streams; reload later", 503)
        return StreamingResponse(stream(hypha, run_id, int(after), first[0].ts),
                                 media_type="text/event-stream",
                                 headers={"cache-control": "no-store",
                                          "x-accel-buffering": "no"})
    return endpoint
