"""JSONL export / import: one :class:`~hypha_celery.events.Event` per line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO

from pydantic import ValidationError

from hypha_celery.errors import ImportFormatError
from hypha_celery.events import Event, fold


def write_jsonl(events: Iterable[Event], out: IO[str]) -> tuple[int, int]:
    """Write ``events`` as JSONL; returns (runs, events) written."""
    runs: set[str] = set()
    count = 0
    for event in events:
        out.write(event.model_dump_json())
        out.write("\n")
        runs.add(event.run_id)
        count += 1
    return len(runs), count


def read_jsonl(lines: Iterable[str], source: str = "<input>") -> list[Event]:
    """Parse and check a whole JSONL export before anything is imported.

    Every non-blank line must be an :class:`Event`; every run's events must be
    numbered 1..n without gaps or duplicates, start with ``run.created`` and fold
    into a projection. Any problem raises :class:`ImportFormatError` naming the
    line (or the run), so a bad file imports nothing.
    """
    events: list[Event] = []
    lines_of: dict[tuple[str, int], int] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = Event.model_validate_json(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            detail = f"{where}: {first['msg']}" if where else first["msg"]
            raise ImportFormatError(f"{source}:{lineno}: not a hypha event ({detail})") from None
        key = (event.run_id, event.seq)
        if key in lines_of:
            raise ImportFormatError(f"{source}:{lineno}: duplicate event seq {event.seq} of run "
                                    f"{event.run_id} (first on line {lines_of[key]})")
        lines_of[key] = lineno
        events.append(event)
    _check_runs(events, lines_of, source)
    return events


def _check_runs(events: list[Event], lines_of: dict[tuple[str, int], int], source: str) -> None:
    by_run: dict[str, list[Event]] = {}
    for event in events:
        by_run.setdefault(event.run_id, []).append(event)
    for run_id, evs in by_run.items():
        evs.sort(key=lambda e: e.seq)
        for expected, event in enumerate(evs, 1):
            if event.seq != expected:
                line = lines_of[(run_id, event.seq)]
                raise ImportFormatError(f"{source}:{line}: run {run_id} has no event seq "
                                        f"{expected} (events must be numbered from 1 without gaps)")
        if evs[0].kind != "run.created":
            raise ImportFormatError(f"{source}:{lines_of[(run_id, 1)]}: run {run_id} must start "
                                    f"with run.created, not {evs[0].kind}")
        _check_fold(run_id, evs, source)


def _check_fold(run_id: str, evs: list[Event], source: str) -> None:
    if not run_id or len(run_id) > 64:
        raise ImportFormatError(f"{source}: run id {run_id!r} must have 1 to 64 characters")
    try:
        view = fold(run_id, ((e.kind, e.data, e.ts) for e in evs))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ImportFormatError(f"{source}: events of run {run_id} do not fold into a run "
                                f"({type(exc).__name__}: {exc})") from None
    if not isinstance(view["graph_id"], str) or not view["graph_id"]:
        raise ImportFormatError(f"{source}: run.created of run {run_id} has no graph_id")
