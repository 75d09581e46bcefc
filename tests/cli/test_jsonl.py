"""JSONL export / import checks: every line sealed; a bad input names its line, raises a
typed error and imports nothing."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import click
import pytest

from hypha_celery import Event
from hypha_celery.cli.selection import parse_session, parse_since
from hypha_celery.errors import (
    ChecksumMismatch,
    DerivedFieldMismatch,
    EmptyImport,
    ImportFormatError,
    ImportSourceMissing,
    IncompleteRun,
    InvalidRun,
    MalformedLine,
    UnknownEventType,
)
from hypha_celery.events.envelope import canonical, checksum, enrich
from hypha_celery.exchange import (
    dump_line,
    import_parsed,
    parse_jsonl,
    read_file,
    read_jsonl,
    write_jsonl,
)
from hypha_celery.store import EventStore
from tests.cli.conftest import DemoRun


def dump(events: list[Event]) -> list[str]:
    out = io.StringIO()
    write_jsonl(events, out)
    return out.getvalue().splitlines(keepends=True)


def reseal(line: str, **changes: object) -> str:
    """``line`` with ``changes`` made and a checksum that matches them (a consistent forgery)."""
    event = Event.model_validate_json(line).model_copy(update=changes)
    return dump_line(event) + "\n"


def test_lines_are_sealed_canonical_envelopes(demo_run: DemoRun) -> None:
    out = io.StringIO()
    assert write_jsonl(demo_run.events, out) == (1, len(demo_run.events))
    lines = out.getvalue().splitlines()
    assert [Event.model_validate_json(line) for line in lines] == [
        e.sealed() for e in demo_run.events]
    for line, event in zip(lines, demo_run.events, strict=True):
        body, _, tail = line.rpartition(',"checksum":')
        assert body + "}" == canonical(event.model_dump(exclude={"checksum"}))
        assert json.loads(tail[:-1]) == checksum(event)
        assert json.loads(tail[:-1]) == "sha256:" + hashlib.sha256(
            (body + "}").encode()).hexdigest()
    assert dump_line(demo_run.events[0].sealed()) == lines[0]  # a stale checksum is replaced


def test_envelopes_read_from_the_store_are_ordinary_models(demo_run: DemoRun) -> None:
    """``enrich`` builds envelopes without pydantic's ``model_construct`` (speed): they
    must be the same models, sealable and valid."""
    for event in demo_run.events:
        assert event == Event.model_construct(**event.__dict__)
        assert event.model_fields_set == set(Event.model_fields)
        assert Event.model_validate(event.model_dump()) == event
        assert event.sealed().checksum == checksum(event)
        assert event.checksum is None  # sealing made a copy


def test_round_trip_into_a_fresh_store(demo_run: DemoRun, tmp_path: Path) -> None:
    text = "".join(dump(demo_run.events))
    parsed = read_jsonl(io.StringIO(text))
    assert parsed == [e.sealed() for e in demo_run.events]
    target = EventStore(f"sqlite:///{tmp_path / 'copy.db'}")
    source = EventStore(demo_run.store_url)
    try:
        done = target.import_events(parsed)
        assert (done.runs, done.events, done.present) == (1, len(parsed), 0)
        assert target.events(demo_run.run_id) == demo_run.events
        assert target.get(demo_run.run_id) == source.get(demo_run.run_id)
        assert "".join(dump(target.events(demo_run.run_id))) == text
    finally:
        target.dispose()
        source.dispose()


def test_blank_lines_and_bytes_are_accepted(demo_run: DemoRun) -> None:
    lines = dump(demo_run.events)
    sealed = [e.sealed() for e in demo_run.events]
    assert read_jsonl(["\n", *lines, "  \n"]) == sealed
    assert read_jsonl([line.encode() for line in lines]) == sealed


def test_a_reformatted_but_unchanged_line_is_accepted(demo_run: DemoRun) -> None:
    lines = dump(demo_run.events)
    pretty = json.dumps(json.loads(lines[2]), indent=None)  # other key order and spacing
    assert pretty != lines[2].rstrip()
    lines[2] = pretty + "\n"
    assert read_jsonl(lines)[2] == demo_run.events[2].sealed()


@pytest.mark.parametrize(("line", "error", "needle"), [
    ("not json\n", MalformedLine, "Invalid JSON"),
    ('{"run_id": "x"}\n', MalformedLine, "type: Field required"),
    ('{"run_id": "x", "seq": 1, "type": "run.created", "timestamp": 1, "payload": {}, '
     '"extra": 1}\n', MalformedLine, "extra"),
    ('{"run_id": "x", "seq": 1, "type": "run.exploded", "timestamp": 1, "payload": {}}\n',
     UnknownEventType, "unknown event type 'run.exploded'"),
    ('{"run_id": "x", "seq": 1, "type": "run.created", "timestamp": 1, "payload": {}}\n',
     ChecksumMismatch, "has no checksum"),
    ('{"run_id": "x", "seq": 1, "type": "run.created", "timestamp": NaN, "payload": {}, '
     '"checksum": "sha256:0"}\n', MalformedLine, "not a hypha event"),
])
def test_a_bad_line_is_named_by_number(demo_run: DemoRun, line: str,
                                       error: type[ImportFormatError], needle: str) -> None:
    lines = dump(demo_run.events)
    lines.insert(3, line)
    with pytest.raises(error) as info:
        read_jsonl(lines, source="runs.jsonl")
    assert str(info.value).startswith("runs.jsonl:4: ")
    assert needle in str(info.value)


@pytest.mark.parametrize("field", ["payload", "type", "timestamp", "idempotency_key",
                                   "correlation_id", "run_id"])
def test_a_changed_line_is_detected(demo_run: DemoRun, field: str) -> None:
    lines = dump(demo_run.events)
    body = json.loads(lines[5])
    body[field] = {"payload": {**body["payload"], "duration": 99.0},
                   "type": "node.execution.failed", "timestamp": body["timestamp"] + 1,
                   "idempotency_key": "other", "correlation_id": "other",
                   "run_id": "other"}[field]
    lines[5] = json.dumps(body) + "\n"
    with pytest.raises(ChecksumMismatch, match=r"^x.jsonl:6: checksum mismatch: event \S+:6 "
                                               "was changed after export"):
        read_jsonl(lines, source="x.jsonl")


@pytest.mark.parametrize(("field", "value"), [
    ("id", "someone:else"), ("correlation_id", "made-up"), ("causation_id", None),
    ("step_id", "7"), ("execution_id", "e"), ("agent_id", "other-graph"),
    ("user_id", "mallory"), ("session_id", "s"),
])
def test_derived_fields_must_match_the_events(demo_run: DemoRun, field: str, value: object,
                                              ) -> None:
    lines = dump(demo_run.events)
    lines[5] = reseal(lines[5], **{field: value})  # the checksum matches the change
    with pytest.raises(DerivedFieldMismatch, match=rf"^x.jsonl:6: event {demo_run.run_id}:6: "
                                                   rf"{field} is {value!r}, but the run's "
                                                   "events give"):
        read_jsonl(lines, source="x.jsonl")


def test_a_gap_in_a_runs_sequence_is_refused(demo_run: DemoRun) -> None:
    lines = dump(demo_run.events)
    del lines[4]  # seq 5
    with pytest.raises(IncompleteRun, match=r"^x.jsonl:5: run \w+ has no event seq 5, the "
                                            r"next is \w+:6"):
        read_jsonl(lines, source="x.jsonl")
    with pytest.raises(IncompleteRun, match=r"^x.jsonl:1: run \w+ has no event seq 1"):
        read_jsonl(dump(demo_run.events)[1:], source="x.jsonl")


def test_a_duplicate_seq_is_refused(demo_run: DemoRun) -> None:
    lines = dump(demo_run.events)
    lines.append(lines[2])
    with pytest.raises(InvalidRun, match=r"duplicate event seq 3 .*first on line 3"):
        read_jsonl(lines)


def test_a_run_must_start_with_run_created(demo_run: DemoRun) -> None:
    evs = [e.model_copy(update={"seq": e.seq - 1}) for e in demo_run.events[1:]]
    with pytest.raises(InvalidRun, match="must start with run.created, not run.started"):
        read_jsonl(dump(evs))


def test_an_imported_payload_is_checked_against_its_types_model() -> None:
    """A mistyped field is refused with its name; a field the model does not know (a newer
    version's, or one written by hand) is tolerated, as the fold ignores it."""
    created = Event(run_id="r", seq=1, type="run.created", timestamp=1.0,
                    payload={"graph_id": "g"})
    decided = Event(run_id="r", seq=2, type="decision.policy.recorded", timestamp=2.0,
                    payload={"step": "first", "type": "next"})
    with pytest.raises(InvalidRun, match=r"\(decision.policy.recorded\) does not fold into "
                                         r"run r \(step: Input should be a valid integer"):
        read_jsonl(dump([created, decided]))
    newer = enrich([("r", 1, "run.created", 1.0, {"graph_id": "g"}, None),
                    ("r", 2, "decision.policy.recorded", 2.0,
                     {"step": 0, "type": "next", "added_later": [1]}, None)],
                   {"graph_id": "g"})
    assert [e.payload for e in read_jsonl(dump(newer))] == [e.payload for e in newer]


def test_events_that_do_not_fold_are_refused() -> None:
    created = Event(run_id="r", seq=1, type="run.created", timestamp=1.0,
                    payload={"graph_id": "g"})
    started = Event(run_id="r", seq=2, type="run.started", timestamp=2.0,
                    payload={})  # no execution_id
    with pytest.raises(InvalidRun, match=r"<input>:2: event r:2 \(run.started\) does not "
                                         "fold into run r"):
        read_jsonl(dump([created, started]))
    nameless = Event(run_id="r", seq=1, type="run.created", timestamp=1.0, payload={})
    with pytest.raises(InvalidRun, match="no graph_id"):
        read_jsonl(dump([nameless]))
    too_long = created.model_copy(update={"payload": {"graph_id": "g", "user_id": "u" * 201}})
    with pytest.raises(InvalidRun, match="user_id 'uuu.* does not fit the store"):
        read_jsonl(dump([too_long]))
    with pytest.raises(InvalidRun, match="run id 'rrr.*' must have 1 to 64 characters"):
        read_jsonl(dump([created.model_copy(update={"run_id": "r" * 65})]))


def test_no_events_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(EmptyImport, match="^empty.jsonl: no events$"):
        read_jsonl([], source="empty.jsonl")
    with pytest.raises(EmptyImport, match="no events"):
        read_jsonl(["\n", "   \n"])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(EmptyImport, match=f"^{empty}: no events$"):
        read_file(str(empty))


def test_a_missing_file_is_a_typed_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ImportSourceMissing, match=f"^{missing}: cannot read it") as info:
        read_file(str(missing))
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(ImportSourceMissing):
        read_file(str(tmp_path))  # a directory


def test_a_bad_file_imports_nothing(demo_run: DemoRun, tmp_path: Path) -> None:
    lines = dump(demo_run.events)
    lines[-1] = lines[-1].replace('"timestamp":', '"timestamp":1')  # the last line changed
    target = EventStore(f"sqlite:///{tmp_path / 'copy.db'}")
    try:
        with pytest.raises(ChecksumMismatch):
            import_parsed(target, parse_jsonl(lines))
        assert target.run_ids() == []
    finally:
        target.dispose()


def test_parse_since_and_session() -> None:
    assert parse_since(None) is None
    assert parse_since("1700000000.5") == 1700000000.5
    assert parse_since("2023-11-14T22:13:20") == 1700000000.0  # UTC without an offset
    assert parse_since("2023-11-14T22:13:20Z") == 1700000000.0
    assert parse_since("2023-11-15T00:13:20+02:00") == 1700000000.0
    for bad in ("yesterday", "nan", "inf"):
        with pytest.raises(click.BadParameter):
            parse_since(bad)
    assert parse_session("u:s:1") == ("u", "s:1")
    assert parse_session(None) is None
    for bad in ("u", ":s", "u:"):
        with pytest.raises(click.BadParameter):
            parse_session(bad)
