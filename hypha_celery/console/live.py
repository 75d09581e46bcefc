"""A live run page over server-sent events: ``GET /runs/{id}/live?after=SEQ&from=FIRST``.

The stream polls the store (every :data:`POLL_SECONDS`) for the run's events after
``SEQ`` and sends each as an ``event: row`` whose data is the row's HTML; after each
batch, the run's facts (``event: facts``: status, steps, events, dead letters, from the
projection row) and, when the batch changed it, the graph drawing (``event: graph``,
drawn from the page's first event ``FIRST`` on). When the run ends, or is held (parked,
quarantined, waiting for a review), it sends ``event: end`` and closes, and the page
reloads to show where the run is. Polling the store, not a
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

from hypha_celery.console.diagram import Drawing, svg
from hypha_celery.console.filters import BadQuery
from hypha_celery.console.pages import run_id_of
from hypha_celery.console.runpage import (
    DEAD_LETTERS_SHOWN,
    TIMELINE_PAGE,
    Header,
    ShownRow,
    shown_rows,
)
from hypha_celery.errors import RunNotFound
from hypha_celery.events import TERMINAL_KINDS, Event
from hypha_celery.projections._timeline import rows
from hypha_celery.store.recovery import DeadLetterRow

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


class _Page:
    """What a live page shows besides its rows: the drawing from its first event, the
    seq and time of the last row sent (a later row's time may be earlier) and the
    run's dead letters."""

    def __init__(self, seed: list[Event], from_start: bool) -> None:
        self.drawing = Drawing(from_start=from_start)
        for e in seed:
            self.drawing.add(e)
        self.previous = (seed[-1].seq, seed[-1].ts) if seed else None
        self.letters: list[DeadLetterRow] | None = None

    def add(self, batch: list[Event]) -> bool:
        """Feed ``batch`` to the drawing: whether it changed."""
        changed = [self.drawing.add(e) for e in batch]
        return any(changed)


def _int(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name, str(default))
    if not value.isdigit() or len(value) > 18:
        raise BadQuery(name, "not a whole number")
    return int(value)


def _opened(hypha: ScopedHypha, run_id: str, after: int, first: int) -> tuple[float, _Page]:
    """The run's creation time and the page's events so far (at most
    :data:`TIMELINE_PAGE`: a live page is the run's last page)."""
    created = hypha.store.events(run_id, 0, 1)
    if not created:
        raise RunNotFound(f"no run {run_id!r} in the event store")
    count = min(after - first + 1, TIMELINE_PAGE)
    seed = hypha.store.events(run_id, first - 1, count) if count > 0 else []
    return created[0].ts, _Page(seed, from_start=first <= 1)


class _Live:
    """The streams of one console: its templates and how many are open."""

    def __init__(self, console: Console) -> None:
        self.open = 0
        self.row_html = console.templates.get_template("_row.html")
        self.facts_html = console.templates.get_template("_facts.html")

    def row(self, row: ShownRow) -> str:
        return " ".join(self.row_html.render(r=row).split())

    def facts(self, hypha: ScopedHypha, run_id: str, page: _Page, batch: list[Event]) -> str:
        """The run's facts now (the dead letters read again when the batch has one)."""
        if page.letters is None or any(e.type == "node.execution.dead_lettered"
                                       for e in batch):
            page.letters = hypha.store.dead_letters(status=None, run_id=run_id,
                                                    limit=DEAD_LETTERS_SHOWN)
        header = Header.of(hypha.store.get(run_id), page.letters)
        return " ".join(self.facts_html.render(v=header).split())

    async def batch(self, hypha: ScopedHypha, run_id: str, batch: list[Event], t0: float,
                    page: _Page) -> AsyncIterator[str]:
        """A batch's rows, then the drawing if it changed, then the facts."""
        for row in shown_rows(rows(batch), t0, page.previous):
            yield _message("row", self.row(row))
            page.previous = (row.row.event.seq, row.row.event.ts)
        if page.add(batch):
            yield _message("graph", svg(page.drawing.diagram()))
        yield _message("facts", await run_in_threadpool(self.facts, hypha, run_id, page,
                                                        batch))

    async def stream(self, hypha: ScopedHypha, run_id: str, after: int, t0: float,
                     page: _Page) -> AsyncIterator[str]:
        self.open += 1
        try:
            deadline, beat = time.monotonic() + MAX_STREAM_SECONDS, time.monotonic()
            while time.monotonic() < deadline:
                batch: list[Event] = await run_in_threadpool(hypha.store.events, run_id, after)
                if batch:
                    async for message in self.batch(hypha, run_id, batch, t0, page):
                        yield message
                    after = batch[-1].seq
                if any(e.type in _ENDS for e in batch):
                    yield _message("end", str(after))
                    return
                if time.monotonic() - beat > HEARTBEAT_SECONDS:
                    beat = time.monotonic()
                    yield ": alive\n\n"
                await asyncio.sleep(POLL_SECONDS)
        finally:
            self.open -= 1


def live_rows(console: Console) -> Callable[[Request], Any]:
    live = _Live(console)

    async def endpoint(request: Request) -> Response:
        hypha = await run_in_threadpool(console.scoped, request)
        run_id = run_id_of(request)
        after, first = _int(request, "after", 0), _int(request, "from", 1)
        t0, page = await run_in_threadpool(_opened, hypha, run_id, after, max(first, 1))
        if live.open >= MAX_STREAMS:
            return PlainTextResponse("too many live streams; reload later", 503)
        return StreamingResponse(live.stream(hypha, run_id, after, t0, page),
                                 media_type="text/event-stream",
                                 headers={"cache-control": "no-store",
                                          "x-accel-buffering": "no"})
    return endpoint
