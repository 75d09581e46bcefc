"""FileFixtureStore: ``<dir>/<safe id>.replay.json``, pretty JSON plus a newline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hypha_celery.errors import InvalidFixture
from hypha_celery.replay import FileFixtureStore, ReplaySpec, capture, compare, read_fixture
from hypha_celery.replay._store import safe_name
from tests.replay.support import ANSWER_CONTRACT, completed_run_events


def test_save_load_round_trip(tmp_path: Path) -> None:
    store = FileFixtureStore(tmp_path / "fixtures")  # created on the first save
    fixture = capture(completed_run_events(), ReplaySpec(snapshot_policy="full"),
                      fixture_id="fixture.local/persisted:1", output_contract=ANSWER_CONTRACT)
    path = store.save(fixture)
    assert path == tmp_path / "fixtures" / "fixture.local_persisted_1.replay.json"
    text = path.read_text()
    assert text.endswith("}\n") and text.startswith('{\n  "id": ')
    assert json.loads(text)["final_output"] == {"answer": "ok"}
    loaded = store.load("fixture.local/persisted:1")
    assert loaded == fixture
    assert loaded is not None and compare(loaded, completed_run_events()).passed
    assert not list(path.parent.glob(".*"))  # no temporary file left behind


def test_safe_names() -> None:
    assert safe_name("run-1.ok_2") == "run-1.ok_2"
    assert safe_name("a/b\\c d:é") == "a_b_c_d__"
    assert safe_name("") == "_"


def test_missing_fixtures_and_directories(tmp_path: Path) -> None:
    assert FileFixtureStore(tmp_path / "nowhere").load("x") is None
    assert FileFixtureStore(tmp_path / "nowhere").list() == []
    with pytest.raises(FileNotFoundError):
        read_fixture(tmp_path / "nowhere.replay.json")


def test_list_is_sorted_and_skips_other_files(tmp_path: Path) -> None:
    store = FileFixtureStore(tmp_path)
    for fid in ("b", "a", "c"):
        store.save(capture(completed_run_events(), fixture_id=fid))
    (tmp_path / "notes.json").write_text("{}")
    assert [f.id for f in store.list()] == ["a", "b", "c"]


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "not a replay fixture"),
    ('{"id": "x"}', r"not a replay fixture \(run_id: Field required\)"),
    (None, "version 2 is not supported"),
    (b"\xff\xfe", "cannot read"),
])
def test_bad_files_are_invalid_fixtures(tmp_path: Path, content: str | bytes | None,
                                        message: str) -> None:
    path = tmp_path / "bad.replay.json"
    if content is None:
        data = json.loads(capture(completed_run_events()).model_dump_json())
        path.write_text(json.dumps({**data, "version": 2}))
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(InvalidFixture, match=message) as info:
        read_fixture(path)
    assert str(path) in str(info.value)
    with pytest.raises(InvalidFixture):
        FileFixtureStore(tmp_path).load("bad")
