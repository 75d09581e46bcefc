"""JSONL export / import checks: a bad file names its line and imports nothing."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from hypha_celery import Event
from hypha_celery.cli.jsonl import read_jsonl, write_jsonl
from hypha_celery.errors import ImportFormatError
from hypha_celery.store import EventStore
from tests.cli.conftest import DemoRun


def dump(events: list[Event]) -> list[str]:
    out = io.StringIO()
    write_jsonl(events, out)
    return out.getvalue().splitlines(keepends=True)


def test_round_trip_into_a_fresh_store(demo_run: DemoRun, tmp_path: Path) -> None:
    out = io.StringIO()
    assert write_jsonl(demo_run.events, out) == (1, len(demo_run.events))
    lines = out.getvalue().splitlines()
    assert lines == [e.model_dump_json() for e in demo_run.events]

    parsed = read_jsonl(io.StringIO(out.getvalue()))
    assert parsed == demo_run.events
    target = EventStore(f"sqlite:///{tmp_path / 'copy.db'}")
    try:
        assert target.import_events(parsed) == (1, len(parsed))
        assert target.events(demo_run.run_id) == demo_run.events
        source = EventStore(demo_run.store_url)
        assert target.get(demo_run.run_id)["status"] == "completed"
        assert target.get(demo_run.run_id)["result"] == source.get(demo_run.run_id)["result"]
        source.dispose()
    finally:
        target.dispose()


def test_blank_lines_are_ignored(demo_run: DemoRun) -> None:
    lines = dump(demo_run.events)
    assert read_jsonl(["\n", *lines, "  \n"]) == demo_run.events


@pytest.mark.parametrize(("line", "needle"), [
    ("not json\n", "Invalid JSON"),
    ('{"run_id": "x"}\n', "seq"),
    ('{"run_id": "x", "seq": 1, "kind": "run.exploded", "ts": 1, "data": {}}\n', "kind"),
    ('{"run_id": "x", "seq": 1, "kind": "run.created", "ts": 1, "data": {}, "extra": 1}\n',
     "extra"),
])
def test_a_bad_line_is_named_by_number(demo_run: DemoRun, line: str, needle: str) -> None:
    lines = dump(demo_run.events)
    lines.insert(3, line)
    with pytest.raises(ImportFormatError) as info:
        read_jsonl(lines, source="runs.jsonl")
    assert str(info.value).startswith("runs.jsonl:4: not a hypha event")
    assert needle in str(info.value)


def test_a_gap_in_a_runs_sequence_is_refused(demo_run: DemoRun) -> None:
    lines = dump(demo_run.events)
    del lines[4]  # seq 5
    with pytest.raises(ImportFormatError, match=r"x.jsonl:5: run \w+ has no event seq 5"):
        read_jsonl(lines, source="x.jsonl")


def test_a_duplicate_seq_is_refused(demo_run: DemoRun) -> None:
    lines = dump(demo_run.events)
    lines.append(lines[2])
    with pytest.raises(ImportFormatError, match=r"duplicate event seq 3 .*first on line 3"):
        read_jsonl(lines)


def test_a_run_must_start_with_run_created(demo_run: DemoRun) -> None:
    evs = [e.model_copy(update={"seq": e.seq - 1}) for e in demo_run.events[1:]]
    with pytest.raises(ImportFormatError, match="must start with run.created, not run.started"):
        read_jsonl(dump(evs))


def test_events_that_do_not_fold_are_refused() -> None:
    created = Event(run_id="r", seq=1, kind="run.created", ts=1.0, data={"graph_id": "g"})
    started = Event(run_id="r", seq=2, kind="run.started", ts=2.0, data={})  # no execution_id
    with pytest.raises(ImportFormatError, match="do not fold"):
        read_jsonl(dump([created, started]))
    nameless = Event(run_id="r", seq=1, kind="run.created", ts=1.0, data={})
    with pytest.raises(ImportFormatError, match="no graph_id"):
        read_jsonl(dump([nameless]))
