"""JSONL export / import: one sealed event envelope per line.

``hypha export`` writes :meth:`EventStore.export <hypha_celery.store.EventStore.export>`
through :func:`write_jsonl`. A line is the envelope's canonical JSON (sorted keys, no
spaces: :func:`hypha_celery.events.envelope.canonical`) without its ``checksum``, with
``"checksum":"sha256:<hex>"`` appended as the last member; the hex digest is that of the
canonical JSON, so ``checksum == Event.sealed().checksum`` and anyone can check a line
by hashing it with its checksum member removed.

``hypha import`` reads the whole input with :func:`parse_jsonl` before anything is
written: every line must be an envelope of a known type whose checksum matches; every
run's events must be numbered 1..n, start with ``run.created``, fold into a projection,
and carry the derived fields (``id``, ``correlation_id``, ``causation_id``, ...) their
events give. Then :meth:`EventStore.import_events` writes it in one transaction. Every
refusal is an :class:`~hypha_celery.errors.ImportFormatError` naming ``FILE:LINE``.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from typing import IO, Any

import click
from pydantic import ValidationError

from hypha_celery.errors import (
    ChecksumMismatch,
    DerivedFieldMismatch,
    EmptyImport,
    ImportSourceMissing,
    InvalidRun,
    MalformedLine,
    UnknownEventType,
)
from hypha_celery.events import Event
from hypha_celery.events.envelope import DERIVED_FIELDS, canonical, derive
from hypha_celery.events.fold import View
from hypha_celery.store.sql import EventStore, ImportResult, check_run, gc_paused

_derived = itemgetter(*DERIVED_FIELDS)
_SUFFIX_HEAD = b',"checksum":"sha256:'
_HEX = 64
_SUFFIX = len(_SUFFIX_HEAD) + _HEX + 2  # ,"checksum":"sha256:<hex>"}


def _digest(body: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()


def dump_line(event: Event) -> str:
    """``event`` sealed, as one line of JSON (no newline): canonical JSON, the checksum
    (recomputed) last. Parses back to ``event.sealed()``."""
    body = dict(event.__dict__)
    del body["checksum"]
    text = canonical(body)
    return f'{text[:-1]},"checksum":"sha256:{hashlib.sha256(text.encode()).hexdigest()}"}}'


def _line_checks_out(line: str | bytes, stated: str) -> bool:
    """Whether ``line``, as written by :func:`dump_line`, hashes to ``stated`` (then it
    is the canonical text of the envelope it parses to, unchanged since export)."""
    raw = (line.encode() if isinstance(line, str) else line).rstrip()
    if raw[-_SUFFIX:-_HEX - 2] != _SUFFIX_HEAD or raw[-2:] != b'"}':
        return False
    return "sha256:" + hashlib.sha256(raw[:-_SUFFIX] + b"}").hexdigest() == stated


def write_jsonl(events: Iterable[Event], out: IO[str]) -> tuple[int, int]:
    """Write ``events`` as JSONL, each sealed; returns (runs, events) written."""
    runs: set[str] = set()
    count = 0
    chunk: list[str] = []
    with gc_paused():
        for event in events:
            chunk.append(dump_line(event))
            runs.add(event.run_id)
            count += 1
            if len(chunk) >= 1000:
                out.write("\n".join(chunk) + "\n")
                chunk.clear()
        if chunk:
            out.write("\n".join(chunk) + "\n")
    return len(runs), count


def export_jsonl(store: EventStore, out: IO[str], run_ids: Iterable[str] | None = None, *,
                 session: tuple[str, str] | None = None, since: float | None = None,
                 ) -> tuple[int, int]:
    """:meth:`EventStore.export` of the selected runs to ``out``; returns (runs, events)."""
    return write_jsonl(store.export(run_ids, session=session, since=since), out)


@dataclass
class Parsed:
    """A checked JSONL input: its events and where each came from."""

    source: str
    events: list[Event] = field(default_factory=list)
    lines: dict[tuple[str, int], int] = field(default_factory=dict)
    views: dict[str, View] = field(default_factory=dict)  # run id -> check_run's fold

    def where(self, event: Event) -> str:
        """``FILE:LINE`` of ``event``."""
        return f"{self.source}:{self.lines[(event.run_id, event.seq)]}"


def parse_jsonl(lines: Iterable[str | bytes], source: str = "<input>") -> Parsed:
    """Parse and check a whole JSONL export (see the module docstring). Blank lines are
    ignored; any problem raises an :class:`~hypha_celery.errors.ImportFormatError`
    naming the line, so a bad input imports nothing."""
    parsed = Parsed(source)
    with gc_paused():
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            event = _parse_line(line, source, lineno)
            key = (event.run_id, event.seq)
            if key in parsed.lines:
                raise InvalidRun(f"{source}:{lineno}: duplicate event seq {event.seq} of run "
                                 f"{event.run_id} (first on line {parsed.lines[key]})")
            parsed.lines[key] = lineno
            parsed.events.append(event)
        if not parsed.events:
            raise EmptyImport(f"{source}: no events")
        by_run: dict[str, list[Event]] = {}
        for event in parsed.events:
            by_run.setdefault(event.run_id, []).append(event)
        for run_id, evs in by_run.items():
            view = parsed.views[run_id] = check_run(run_id, evs, parsed.where)
            _check_derived(evs, view, parsed.where)
    return parsed


def read_jsonl(lines: Iterable[str | bytes], source: str = "<input>") -> list[Event]:
    """The events of a checked JSONL export (:func:`parse_jsonl`), in input order."""
    return parse_jsonl(lines, source).events


def read_file(path: str) -> Parsed:
    """:func:`parse_jsonl` of a file (``-``: standard input)."""
    if path == "-":
        return parse_jsonl(sys.stdin.buffer, "<stdin>")
    try:
        with open(path, "rb") as file:
            return parse_jsonl(file, path)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise ImportSourceMissing(f"{path}: cannot read it: {exc.strerror}") from None


def import_parsed(store: EventStore, parsed: Parsed) -> ImportResult:
    """:meth:`EventStore.import_events` of a checked input (one transaction)."""
    with gc_paused():
        return store.import_events(parsed.events, where=parsed.where, checked=parsed.views)


def _validate(line: str | bytes) -> Event:
    """The fast parser; pydantic's refuses a lone surrogate escape (``\ud800``) that
    Python's JSON accepts (and node output may hold), so such a line goes the slow way."""
    try:
        return Event.model_validate_json(line)
    except ValidationError as exc:
        if "escape" not in str(exc):
            raise
        try:
            data = json.loads(line)
        except ValueError:
            raise exc from None
        return Event.model_validate(data)


def _parse_line(line: str | bytes, source: str, lineno: int) -> Event:
    try:
        event = _validate(line)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["loc"] == ("type",) and first["type"] == "literal_error":
            raise UnknownEventType(f"{source}:{lineno}: unknown event type {first['input']!r} "
                                   "(not one of hypha's event types)") from None
        where = ".".join(str(p) for p in first["loc"])
        detail = f"{where}: {first['msg']}" if where else first["msg"]
        raise MalformedLine(f"{source}:{lineno}: not a hypha event ({detail})") from None
    stated = event.checksum
    if stated is None:
        raise ChecksumMismatch(f"{source}:{lineno}: event {event.run_id}:{event.seq} has no "
                               "checksum (every line of `hypha export` has one)")
    if _line_checks_out(line, stated):
        return event
    body = dict(event.__dict__)  # not as written by export (reformatted?): the slow way
    del body["checksum"]
    try:
        actual = _digest(body)
    except (ValueError, UnicodeError) as exc:  # NaN / Infinity, a lone surrogate
        raise MalformedLine(f"{source}:{lineno}: not a hypha event ({exc})") from None
    if actual != stated:
        raise ChecksumMismatch(f"{source}:{lineno}: checksum mismatch: event {event.run_id}:"
                               f"{event.seq} was changed after export")
    return event


def _check_derived(evs: list[Event], run: dict[str, Any], where: Callable[[Event], str],
                   ) -> None:
    """The derived fields of one run's events (in ``seq`` order) are what
    :func:`~hypha_celery.events.envelope.derive` computes from the events and the run
    (``user_id``, ``session_id``, ``graph_id``)."""
    rows = ((e.run_id, e.seq, e.type, e.timestamp, e.payload, e.idempotency_key) for e in evs)
    for event, want in zip(evs, derive(rows, run), strict=True):
        got = _derived(event.__dict__)
        if got == want:
            continue
        for name, mine, theirs in zip(DERIVED_FIELDS, got, want, strict=True):
            if mine != theirs:
                raise DerivedFieldMismatch(f"{where(event)}: event {want[0]}: {name} is "
                                           f"{mine!r}, but the run's events give {theirs!r}")


# -- command-line values -------------------------------------------------------------
def parse_session(value: str | None) -> tuple[str, str] | None:
    """``--session USER_ID:SESSION_ID`` (split at the first colon)."""
    if value is None:
        return None
    user, sep, session = value.partition(":")
    if not sep or not user or not session:
        raise click.BadParameter(f"{value!r} is not USER_ID:SESSION_ID",
                                 param_hint="'--session'")
    return user, session


def parse_since(value: str | None) -> float | None:
    """``--since``: epoch seconds, or an ISO 8601 time (UTC when it has no offset)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise click.BadParameter(f"{value!r} is not a time", param_hint="'--since'")
        return seconds
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither an ISO 8601 time nor epoch seconds",
                                 param_hint="'--since'") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()
