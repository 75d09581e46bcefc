"""``exchange.import_file``: :func:`read_file` then :func:`import_parsed` in one, on SQLite
and PostgreSQL. On PostgreSQL the events of new runs are written while the lines after
them are read (one transaction, one COPY), and an unsigned file's checksums are computed
by a child process; whatever the input, the outcome must be the classic one: the same
result, or the same error (type and message) with nothing written."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from hypha_celery import Hypha, SessionOpening
from hypha_celery.errors import ImportConflict
from hypha_celery.events import Event
from hypha_celery.exchange import (
    _jsonl,
    _stream,
    dump_line,
    export_jsonl,
    import_file,
    import_parsed,
    read_file,
)
from hypha_celery.exchange._signing import Signer
from hypha_celery.store import EventStore, ImportResult
from hypha_celery.store.imports import ImportStream
from tests.conftest import migrated
from tests.store import test_import_sessions as sessions
from tests.store.test_imports import _fail_inserts_of, count_events, export_text, jsonl, make_run


@pytest.fixture
def fresh(fresh_url: str) -> Iterator[EventStore]:
    """An empty, migrated store of the same backend."""
    yield from migrated(fresh_url)


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs checked every 2 events and rows sent one at a time: a small file streams many
    batches before its end (a later bad line must still roll them back)."""
    monkeypatch.setattr(_jsonl, "_STEP", 1)
    monkeypatch.setattr(_stream, "_SEND", 1)


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the import streams did: ``"opened"``, ``"sent"`` per batch sent,
    ``"committed"``, ``"rolled back"``."""
    done: list[str] = []
    opens, send, commit, abort = (ImportStream.open, ImportStream.send, ImportStream.commit,
                                  ImportStream.abort)

    def opened(self: ImportStream, run_ids: list[str]) -> bool:
        ok = opens(self, run_ids)
        done.append("opened" if ok else "refused")
        return ok

    def sent(self: ImportStream, rows: Any) -> bool:
        ok = send(self, rows)
        done.append("sent" if ok else "refused")
        return ok

    def committed(self: ImportStream, *args: Any) -> bool:
        ok = commit(self, *args)
        done.append("committed" if ok else "refused")
        return ok

    def aborted(self: ImportStream) -> None:
        if not self.given_up:
            done.append("rolled back")
        abort(self)

    monkeypatch.setattr(ImportStream, "open", opened)
    monkeypatch.setattr(ImportStream, "send", sent)
    monkeypatch.setattr(ImportStream, "commit", committed)
    monkeypatch.setattr(ImportStream, "abort", aborted)
    return done


def write(tmp_path: Path, text: str, name: str = "x.jsonl") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


Outcome = ImportResult | tuple[str, str]


def outcome(how: Callable[[], ImportResult]) -> Outcome:
    """What an import gave: its result, or its error's type and message."""
    try:
        return how()
    except Exception as exc:  # compared, whatever it is
        return type(exc).__name__, str(exc)


def classic(store: EventStore, path: str, **kw: Any) -> Outcome:
    return outcome(lambda: import_parsed(store, read_file(path, **kw)))


def streamed(store: EventStore, path: str, **kw: Any) -> Outcome:
    return outcome(lambda: import_file(store, path, **kw))


def refused_alike(store: EventStore, path: str, **kw: Any) -> tuple[str, str]:
    """The classic import and :func:`import_file` of ``path`` fail alike, writing nothing
    (``store`` as it was: the error of each)."""
    before = count_events(store)
    first = classic(store, path, **kw)
    assert isinstance(first, tuple), first
    assert streamed(store, path, **kw) == first
    assert count_events(store) == before
    return first


def test_round_trip_is_lossless(store: EventStore, fresh: EventStore, tmp_path: Path,
                                streams: list[str]) -> None:
    ids = [make_run(store, key="start-key"), make_run(store, steps=3, user=None, session=None),
           make_run(store, steps=1)]
    text = export_text(store, ids)
    done = import_file(fresh, write(tmp_path, text))
    assert done == ImportResult(runs=3, events=len(text.splitlines()), present=0)
    if fresh.dialect == "postgresql":  # streamed, in many batches, one COPY
        assert streams.count("sent") > 10 and streams[-1] == "committed"
        assert streams.count("opened") == 1 and streams[0] == "opened"
    else:
        assert streams == []
    streams.clear()
    assert export_text(fresh) == text  # export -> import -> export: the same lines
    for run_id in ids:
        assert fresh.events(run_id) == store.events(run_id)
        assert fresh.get(run_id) == store.get(run_id) == fresh.rebuild(run_id)
    assert fresh.find_idempotent("start-key") is None  # not claimed in this store
    again = import_file(fresh, write(tmp_path, text))  # twice: nothing more
    assert again == ImportResult(runs=0, events=0, present=done.events)
    assert export_text(fresh) == text
    assert "sent" not in streams and "committed" not in streams  # the store has the first


def test_the_default_batches_stream_a_long_run(store: EventStore, fresh: EventStore,
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the module's own _STEP and _SEND
    ids = [make_run(store, steps=400), make_run(store)]  # 2,000 events and more
    text = export_text(store, ids)
    assert import_file(fresh, write(tmp_path, text)).events == len(text.splitlines())
    assert export_text(fresh) == text


def test_a_run_the_store_has_fewer_events_of_gets_the_rest(store: EventStore,
                                                           fresh: EventStore,
                                                           tmp_path: Path) -> None:
    new, old = make_run(store), make_run(store, steps=3)
    evs = store.events(old)
    import_file(fresh, write(tmp_path, jsonl(evs[:5])))
    done = import_file(fresh, write(tmp_path, export_text(store, [new, old])))
    assert done == ImportResult(runs=2, events=len(store.events(new)) + len(evs) - 5,
                                present=5)
    assert fresh.events(old) == evs and fresh.get(old) == store.get(old)
    assert export_text(fresh, [new, old]) == export_text(store, [new, old])


def test_conflicts_with_the_store_are_the_classic_ones(store: EventStore, fresh: EventStore,
                                                       tmp_path: Path) -> None:
    a, b, c = make_run(store), make_run(store), make_run(store)
    import_file(fresh, write(tmp_path, export_text(store, [a])))
    changed = [e.model_copy(update={"payload": {**e.payload, "duration": 9.0}})
               if e.seq == 6 else e for e in store.events(a)]
    # a new run first (streamed), then a different event under an id the store has
    kind, message = refused_alike(fresh, write(tmp_path, jsonl(store.events(b))
                                               + jsonl(changed)))
    assert kind == "ImportConflict" and f"event {a}:6 differs" in message
    stolen = [e.model_copy(update={"idempotency_key": f"{a}.1:done"})
              if e.idempotency_key == f"{b}.1:done" else e for e in store.events(b)]
    kind, message = refused_alike(fresh, write(tmp_path, export_text(store, [c])
                                               + jsonl(stolen)))
    assert kind == "ImportConflict" and f"'{a}.1:done' of event {a}:6 in the store" in message
    twice = [e.model_copy(update={"idempotency_key": "same"}) if e.seq in (6, 10) else e
             for e in store.events(b)]
    kind, message = refused_alike(fresh, write(tmp_path, jsonl(twice)))
    assert kind == "ImportConflict" and f"'same' of event {b}:6" in message
    assert fresh.load(b) is None and fresh.load(c) is None


def test_the_database_refusing_a_late_run_writes_nothing(store: EventStore, fresh: EventStore,
                                                        tmp_path: Path) -> None:
    ids = [make_run(store) for _ in range(3)]
    _fail_inserts_of(fresh, ids[-1])
    path = write(tmp_path, export_text(store, ids))
    with pytest.raises((ImportConflict, sa.exc.DBAPIError), match="injected"):
        import_file(fresh, path)
    assert all(fresh.load(r) is None for r in ids) and count_events(fresh) == 0


def bad_inputs(store: EventStore) -> dict[str, str]:
    """Inputs the classic import refuses, each its own way: a bad line after many good
    ones (streamed meanwhile), errors in an order the classic way ranks."""
    a, b = make_run(store, steps=3), make_run(store)
    good = export_text(store, [a, b]).splitlines(keepends=True)
    one = jsonl(store.events(b)).splitlines(keepends=True)

    def changed(line: str, **update: Any) -> str:
        body = json.loads(line)
        body.update(update)
        return json.dumps(body, separators=(",", ":")) + "\n"

    def resealed(line: str, **update: Any) -> str:
        return dump_line(Event.model_validate_json(line).model_copy(update=update)) + "\n"

    return {
        "malformed last line": "".join([*good, "not json\n"]),
        "checksum then malformed": "".join([*good[:3], changed(good[3], timestamp=1.0),
                                            *good[4:], "{}\n"]),
        "stale checksum": "".join([*good[:-2], changed(good[-2], timestamp=1.0), good[-1]]),
        "derived field": "".join([*good[:5], resealed(good[5], correlation_id="made-up"),
                                  *good[6:]]),
        "gap": "".join([*good[:4], *good[5:]]),
        "duplicate": "".join([*good, good[2]]),
        "run comes back": "".join([*one[:3], *good, *one[3:]]),
        "duplicate after a run came back": "".join([*one[:3], *good, *one[2:]]),
        "no events": "\n \n",
    }


def test_bad_inputs_are_refused_as_classically(store: EventStore, fresh: EventStore,
                                               tmp_path: Path, streams: list[str]) -> None:
    for name, text in bad_inputs(store).items():
        streams.clear()
        kind, _ = refused_alike(fresh, write(tmp_path, text))
        assert kind.endswith(("Mismatch", "Line", "Run", "Import")), (name, kind)
        assert "committed" not in streams, name
        if fresh.dialect == "postgresql" and name in ("malformed last line", "stale checksum"):
            assert "sent" in streams and streams[-1] == "rolled back", (name, streams)
    assert count_events(fresh) == 0


def variant(lines: list[str], name: str) -> str:
    """An export's ``lines`` as an input the stream leaves to the classic way."""
    reformatted = json.dumps(json.loads(lines[3]), indent=None) + "\n"  # other key order
    return {"reversed": "".join(reversed(lines)),
            "interleaved": "".join([*lines[:2], *lines[-3:], *lines[2:-3]]),
            "reformatted": "".join([*lines[:3], reformatted, *lines[4:]]),
            "blank lines": "\n" + "  \n".join(lines)}[name]


@pytest.mark.parametrize("name", ["reversed", "interleaved", "reformatted", "blank lines"])
def test_inputs_the_stream_leaves_to_the_classic_way(store: EventStore, fresh: EventStore,
                                                     tmp_path: Path, name: str) -> None:
    """Lines out of order, a run that comes back after another, a reformatted line: the
    same import as the classic way's."""
    a, b = make_run(store), make_run(store, steps=1)
    text = export_text(store, [a, b])
    lines = text.splitlines(keepends=True)
    done = import_file(fresh, write(tmp_path, variant(lines, name)))
    assert done == ImportResult(runs=2, events=len(lines), present=0)
    assert export_text(fresh, [a, b]) == text
    assert all(fresh.get(r) == store.get(r) for r in (a, b))


def test_signed_files(store: EventStore, fresh: EventStore, tmp_path: Path) -> None:
    ids = [make_run(store), make_run(store)]
    key = b"a test key of some length"
    path = tmp_path / "signed.jsonl"
    with path.open("w") as out:
        export_jsonl(store, out, ids, key=key)
    lines = path.read_text().splitlines(keepends=True)
    tampered = write(tmp_path, "".join([*lines[:4], lines[5], lines[4], *lines[6:]]))
    kind, _ = refused_alike(fresh, tampered, key=key)
    assert kind == "SignatureMismatch"
    done = import_file(fresh, str(path), key=key, verify=True)
    assert (done.runs, done.present) == (2, 0)
    assert export_text(fresh, ids) == export_text(store, ids)


def test_a_signed_file_whose_line_states_a_wrong_checksum(store: EventStore,
                                                          fresh: EventStore,
                                                          tmp_path: Path) -> None:
    """A signer that signed a line whose checksum is wrong: the signatures verify, the
    child's checksum of that line (its ``mac`` left out) differs, so the file is read
    again the classic way, which names the line; nothing is written."""
    ids = [make_run(store), make_run(store)]
    key = b"a test key of some length"
    plain = io.StringIO()
    export_jsonl(store, plain, ids)
    lines = plain.getvalue().splitlines()
    head, _, digest = lines[3].rpartition('"sha256:')
    lines[3] = f'{head}"sha256:{"0" * len(digest[:-2])}"}}'
    signer = Signer(key)
    signed = [signer.header(), *(signer.line(line) for line in lines), signer.trailer(2)]
    path = write(tmp_path, "\n".join(signed) + "\n")
    kind, message = refused_alike(fresh, path, key=key, verify=True)
    assert kind == "ChecksumMismatch" and ":5:" in message


def test_a_signed_file_leaves_its_checksums_to_the_child(store: EventStore, fresh: EventStore,
                                                        tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [make_run(store), make_run(store)]
    key = b"a test key of some length"
    path = tmp_path / "signed.jsonl"
    with path.open("w") as out:
        export_jsonl(store, out, ids, key=key)
    events = len(path.read_text().splitlines()) - 2  # the header and the trailer
    asked: list[bool] = []
    output = _stream._LineSums.output

    def spy(self: Any, signed: bool = False) -> bytes | None:
        asked.append(signed)
        found = output(self, signed)
        assert found is not None
        assert found.count(b"sha256:") == events
        return found

    monkeypatch.setattr(_stream._LineSums, "output", spy)
    done = import_file(fresh, str(path), key=key, verify=True)
    assert done == ImportResult(runs=2, events=events, present=0)
    if fresh.dialect == "postgresql":  # streamed: the child's sums compared
        assert asked == [True]


@pytest.fixture
def source(store_url: str) -> Iterator[Hypha]:
    yield from sessions._hypha(store_url)


@pytest.fixture
def target(fresh_url: str) -> Iterator[Hypha]:
    yield from sessions._hypha(fresh_url)


def test_the_sessions_of_a_streamed_import(source: Hypha, target: Hypha, tmp_path: Path,
                                          streams: list[str]) -> None:
    """The session rows as the classic import leaves them (tests/store/
    test_import_sessions.py), from a streamed one."""
    ann = f"ann-{uuid.uuid4().hex[:8]}"
    opening = SessionOpening(profile="desk", metadata={"tier": "gold"})
    ids = [sessions._start(source, ann, s, session=opening) for s in ("kept", "updated",
                                                                      "closed")]
    ids.append(sessions._start(source, ann, "updated"))
    source.update_session("updated", {"tier": "platinum", "seat": 4}, user_id=ann)
    source.close_session("closed", user_id=ann, reason="resolved")
    path = write(tmp_path, sessions._export(source, ids))
    done = import_file(target.store, path)
    assert (done.runs, done.present) == (4, 0)
    assert "committed" in streams or target.store.dialect == "sqlite"
    assert sessions._sessions(target, ann) == sessions._sessions(source, ann)
    assert import_file(target.store, path).events == 0
    assert sessions._sessions(target, ann) == sessions._sessions(source, ann)


def test_a_pipe_is_read_once(store: EventStore, fresh: EventStore, tmp_path: Path) -> None:
    """A named pipe (``hypha import <(...)``) is not read twice: no child process reads
    its lines, and a stream that gives up does not read it again."""
    ids = [make_run(store), make_run(store)]
    text = export_text(store, ids)
    pipe = tmp_path / "runs.jsonl"
    os.mkfifo(pipe)
    writer = threading.Thread(target=pipe.write_text, args=(text,))
    writer.start()
    done = import_file(fresh, str(pipe))
    writer.join()
    assert (done.runs, done.events, done.present) == (2, len(text.splitlines()), 0)
    assert export_text(fresh, ids) == text


def test_standard_input_is_read_once(store: EventStore, fresh: EventStore, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``-`` is standard input, even beside a file named ``-``."""
    ids = [make_run(store)]
    text = export_text(store, ids)
    monkeypatch.chdir(tmp_path)
    Path("-").write_text("not json\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    done = import_file(fresh, "-")
    assert (done.runs, done.events) == (1, len(text.splitlines()))
    assert export_text(fresh, ids) == text
