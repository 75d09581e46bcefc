"""Fuzzing the JSONL import: ``parse_jsonl`` (every line and run check), ``read_file``
(signed and unsigned, with and without a key), the signature ``Verifier``, and
``import_parsed`` into a SQLite store. For any input: a :class:`Parsed` input (which
then imports, round-trips and imports again as present), or an ``ImportFormatError``
naming the source; nothing else, and each example within the deadline."""

from __future__ import annotations

import contextlib
import io
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from hypha_celery import Event
from hypha_celery.errors import ImportConflict, ImportFormatError
from hypha_celery.events.envelope import EventType, bodies
from hypha_celery.exchange import Parsed, import_parsed, parse_jsonl, read_file, write_jsonl
from hypha_celery.exchange._signing import Verifier, is_signed, unsigned
from hypha_celery.store import EventStore, check_run
from tests.fuzz._mutate import DEEP, JSON, byte_flips, line_edits, resealed, seal, tally
from tests.fuzz.conftest import Export, budget

SOURCE = "fuzz.jsonl"
_files = itertools.count()


def parse(lines: list[str] | list[bytes]) -> Parsed | None:
    """``parse_jsonl`` of ``lines``: the input, or None when it was refused (as it must
    be: with an ImportFormatError naming the source)."""
    try:
        parsed = parse_jsonl(lines, SOURCE)
    except ImportFormatError as exc:
        assert str(exc).startswith(SOURCE), str(exc)
        return None
    assert parsed.events
    for event in parsed.events:
        assert parsed.where(event).startswith(f"{SOURCE}:")
    return parsed


def round_trips(parsed: Parsed) -> None:
    out = io.StringIO()
    write_jsonl(parsed.events, out)
    again = parse_jsonl(out.getvalue().splitlines(keepends=True), SOURCE)
    assert [e.sealed() for e in again.events] == [e.sealed() for e in parsed.events]


@pytest.fixture(scope="module")
def store(fuzz_dir: Path) -> Iterator[EventStore]:
    s = EventStore(f"sqlite:///{fuzz_dir / 'jsonl.db'}")
    s.migrate()
    yield s
    s.dispose()


def imports(store: EventStore, parsed: Parsed) -> None:
    """An input that parsed imports (or conflicts with an earlier example's run of the
    same id), and a second import adds nothing."""
    try:
        import_parsed(store, parsed)
    except ImportConflict:
        return
    again = import_parsed(store, parsed)
    assert (again.events, again.present) == (0, len(parsed.events))


# -- arbitrary input -----------------------------------------------------------------------
LINES = st.lists(st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(str.encode),
    JSON.map(lambda v: repr(v).encode()),
    DEEP.map(str.encode),
    st.sampled_from([b"{}", b"[]", b"null", b'{"type":"run.created"}', b"\xff\xfe",
                     b'{"hypha_signed_export":1}', b"NaN", b"1e999"])),
    max_size=8).map(lambda lines: [line + b"\n" for line in lines])


@budget(300)
@given(LINES)
def test_arbitrary_lines(lines: list[bytes]) -> None:
    parsed = parse(lines)
    assert parsed is None  # nothing made up at random seals and folds
    assert parse([line.decode("utf-8", "replace") for line in lines]) is None


@budget(200)
@given(st.binary(max_size=400))
def test_arbitrary_file(fuzz_dir: Path, data: bytes) -> None:
    path = fuzz_dir / f"any-{next(_files)}.jsonl"
    path.write_bytes(data)
    for key, verify in ((None, False), (b"k" * 16, False), (b"k" * 16, True)):
        with contextlib.suppress(ImportFormatError):
            read_file(str(path), key=key, verify=verify)


# -- mutated valid exports -------------------------------------------------------------------
def test_the_export_parses_and_imports(export: Export, store: EventStore) -> None:
    parsed = parse(export.lines)
    assert parsed is not None and len(parsed.events) == len(export.events)
    round_trips(parsed)
    imports(store, parsed)


@budget(150)
@given(st.data())
def test_resealed_values(export: Export, store: EventStore, data: st.DataObject) -> None:
    lines = data.draw(resealed(export.lines))
    parsed = parse(lines)
    if parsed is not None:
        round_trips(parsed)
        imports(store, parsed)


@budget(150)
@given(st.data())
def test_line_edits(export: Export, store: EventStore, data: st.DataObject) -> None:
    lines = data.draw(line_edits(export.lines))
    parsed = parse(lines)
    if parsed is not None:
        imports(store, parsed)


@budget(150)
@given(st.data())
def test_byte_flips(export: Export, data: st.DataObject) -> None:
    lines = data.draw(byte_flips(export.lines))
    parse(lines)


# -- signed exports --------------------------------------------------------------------------
def _verified(export: Export, lines: list[bytes] | list[str], key: bytes | None) -> None:
    try:
        parse_jsonl(Verifier(key or export.key, SOURCE).lines(lines), SOURCE, first_lineno=2)
    except ImportFormatError as exc:
        assert str(exc).startswith(SOURCE), str(exc)


@budget(150)
@given(st.data(), st.sampled_from(["edits", "flips", "resealed"]))
def test_signed_export_mutations(export: Export, fuzz_dir: Path, data: st.DataObject,
                                 how: str) -> None:
    if how == "edits":
        lines: list[str] | list[bytes] = data.draw(line_edits(export.signed))
    elif how == "flips":
        lines = data.draw(byte_flips(export.signed))
    else:  # a changed line, sealed again: the signature must catch it
        lines = data.draw(resealed(export.signed))
    _verified(export, lines, None)
    path = fuzz_dir / f"signed-{next(_files)}.jsonl"
    path.write_bytes(b"".join(x if isinstance(x, bytes) else x.encode() for x in lines))
    for key, verify in ((export.key, True), (export.key, False), (None, False),
                        (b"another key, long enough", True)):
        try:
            parsed = read_file(str(path), key=key, verify=verify)
        except ImportFormatError:
            continue
        assert parsed.events
        if key == export.key and verify:  # what verifies is what was signed
            assert [e.sealed() for e in parsed.events] == [e.sealed() for e in export.events]


@budget(200)
@given(st.lists(st.binary(max_size=120) | st.text(max_size=120), max_size=6))
def test_signature_helpers_on_arbitrary_lines(lines: list[bytes | str]) -> None:
    for line in lines:
        assert isinstance(is_signed(line), bool)
    list(unsigned(lines))
    with contextlib.suppress(ImportFormatError):
        list(Verifier(b"k" * 16, SOURCE).lines(lines))


# -- consistent forgeries: rows changed, every derived field and checksum made again -------
KINDS = sorted(get_args(EventType))
_ROW_FIELDS = ("type", "timestamp", "payload", "idempotency_key", "seq", "run_id")


@st.composite
def forged_rows(draw: st.DrawFn, events: list[Event]) -> list[list[Any]]:
    """The export's stored rows with a few fields or payload members changed."""
    rows = [[e.run_id, e.seq, e.type, e.timestamp, dict(e.payload), e.idempotency_key]
            for e in events]
    for _ in range(draw(st.integers(1, 3))):
        row = draw(st.sampled_from(rows))
        field = draw(st.sampled_from(_ROW_FIELDS + ("member",) * 4))
        if field == "type":
            row[2] = draw(st.sampled_from(KINDS))
        elif field == "timestamp":
            row[3] = draw(st.floats(allow_nan=False, allow_infinity=False) | st.integers())
        elif field == "payload":
            row[4] = draw(st.dictionaries(st.text(max_size=12), JSON, max_size=4))
        elif field == "idempotency_key":
            row[5] = draw(st.none() | st.text(max_size=210))
        elif field == "seq":
            row[1] = draw(st.integers(-2, len(rows) + 2) | st.integers())
        elif field == "run_id":
            row[0] = draw(st.sampled_from(["", "x", "r" * 65]) | st.text(max_size=70))
        elif row[4]:
            key = draw(st.sampled_from(sorted(row[4])))
            row[4][key] = draw(JSON)
        else:
            row[4][draw(st.text(max_size=8))] = draw(JSON)
    return rows


def _fresh(rows: list[list[Any]], export: Export) -> list[list[Any]]:
    """``rows`` moved to a run id (and idempotency keys) the store does not have yet."""
    fresh, old = f"fuzz-{next(_files)}", export.events[0].run_id
    for row in rows:
        row[0] = fresh if row[0] == old else row[0]
        row[5] = row[5].replace(old, fresh) if isinstance(row[5], str) else row[5]
    return rows


def _forged_lines(rows: list[list[Any]]) -> list[str]:
    run = rows[0][4] if isinstance(rows[0][4], dict) else {}
    try:
        made = bodies([tuple(r) for r in rows], run)  # type: ignore[misc]
    except Exception:  # derive() refused these rows: seal them with the derived fields
        tally("derive refused the rows")
        made = [{"run_id": r[0], "seq": r[1], "type": r[2], "timestamp": r[3],
                 "payload": r[4], "idempotency_key": r[5]} for r in rows]
    try:
        return [seal(body) for body in made]
    except ValueError:  # an integer timestamp too long for the JSON encoder
        tally("not encodable")
        return []


@budget(200)
@given(st.data())
def test_consistent_forgeries(export: Export, store: EventStore, data: st.DataObject) -> None:
    lines = _forged_lines(_fresh(data.draw(forged_rows(export.events)), export))
    parsed = parse(lines)
    tally("parsed" if parsed is not None else "refused")
    if parsed is not None:
        round_trips(parsed)
        imports(store, parsed)


@budget(200)
@given(st.data())
def test_store_import_checks(export: Export, store: EventStore, data: st.DataObject) -> None:
    """``check_run`` and ``EventStore.import_events`` (no JSONL: events as a caller
    builds them) refuse a forged run with an ImportFormatError and nothing else."""
    rows = _fresh(data.draw(forged_rows(export.events)), export)
    events = []
    for line in _forged_lines(rows):
        try:
            events.append(Event.model_validate_json(line))
        except ValidationError:
            tally("not an envelope")
    by_run: dict[str, list[Event]] = {}
    for e in events:
        by_run.setdefault(e.run_id, []).append(e)
    for run_id, evs in by_run.items():
        try:
            check_run(run_id, list(evs))
        except ImportFormatError:
            tally("check_run refused")
    try:
        store.import_events(events)
        tally("imported")
    except ImportFormatError:
        tally("import refused")
