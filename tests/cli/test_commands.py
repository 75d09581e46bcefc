"""The commands against a local SQLite store (in-process, click's CliRunner), and
their error paths: one ``hypha: error:`` line, exit 2 for usage, 1 otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hypha_celery import Event, errors
from hypha_celery.cli import cli
from hypha_celery.exchange import dump_line, parse_jsonl
from hypha_celery.store import EventStore
from tests.cli.conftest import DemoRun
from tests.cli.helpers import ROOT, assert_one_line_error, clean_env, hypha


def invoke(*args: str, store_url: str | None = None, **env: str) -> Result:
    if store_url is not None:
        env["HYPHA_STORE_URL"] = store_url
    return CliRunner().invoke(cli, list(args), env={"HYPHA_BROKER_URL": None, **env},
                              catch_exceptions=False)


def one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hypha: error: ")
    assert "Traceback" not in result.output
    return lines[0]


def test_status(demo_run: DemoRun) -> None:
    result = invoke("status", demo_run.run_id, store_url=demo_run.store_url)
    assert result.exit_code == 0, result.output
    rows = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert rows["run"] == demo_run.run_id
    assert rows["status"] == "completed" and rows["graph"] == "support"
    assert rows["events"] == str(len(demo_run.events))
    as_json = json.loads(invoke("status", demo_run.run_id, "--json",
                                store_url=demo_run.store_url).stdout)
    assert as_json["status"] == "completed" and "state" not in as_json and "input" not in as_json


def test_events_timeline_and_json(demo_run: DemoRun) -> None:
    result = invoke("events", demo_run.run_id, store_url=demo_run.store_url)
    assert result.exit_code == 0, result.output
    assert [line.split()[2] for line in result.stdout.splitlines()] == [
        e.kind for e in demo_run.events]
    raw = invoke("events", demo_run.run_id, "--json", store_url=demo_run.store_url).stdout
    assert [Event.model_validate_json(line) for line in raw.splitlines()] == demo_run.events
    followed = invoke("events", demo_run.run_id, "--follow", store_url=demo_run.store_url)
    assert followed.stdout == result.stdout  # a finished run: prints all, returns


def test_cancel_of_a_finished_run_changes_nothing(demo_run: DemoRun) -> None:
    result = invoke("cancel", demo_run.run_id, store_url=demo_run.store_url)
    assert result.exit_code == 0
    assert "already ended (completed)" in result.stdout
    assert len(EventStore(demo_run.store_url).events(demo_run.run_id)) == len(demo_run.events)


def test_export_then_import_into_a_fresh_store(demo_run: DemoRun, tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    result = invoke("export", "-o", str(out), store_url=demo_run.store_url)
    assert result.exit_code == 0, result.output
    assert f"exported {len(demo_run.events)} events of 1 runs" in result.stderr
    lines = out.read_text().splitlines()
    assert [Event.model_validate_json(line) for line in lines] == [
        e.sealed() for e in demo_run.events]
    stdout = invoke("export", demo_run.run_id, store_url=demo_run.store_url).stdout
    assert stdout == out.read_text()
    assert invoke("export", "--run", demo_run.run_id, "--out", str(tmp_path / "again.jsonl"),
                  store_url=demo_run.store_url).exit_code == 0
    assert (tmp_path / "again.jsonl").read_text() == out.read_text()

    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = invoke("import", str(out), store_url=fresh)
    assert result.exit_code == 0, result.output
    assert result.stdout == (f"imported 1 runs ({len(lines)} events); 0 events already "
                             "present, skipped\n")
    assert EventStore(fresh).events(demo_run.run_id) == demo_run.events
    assert invoke("export", store_url=fresh).stdout == out.read_text()  # lossless
    again = invoke("import", str(out), store_url=fresh)
    assert again.exit_code == 0, again.output
    assert again.stdout == (f"imported 0 runs (0 events); {len(lines)} events already "
                            "present, skipped (nothing new)\n")


def test_import_from_stdin(demo_run: DemoRun, tmp_path: Path) -> None:
    text = invoke("export", store_url=demo_run.store_url).stdout
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = CliRunner().invoke(cli, ["import", "-"], input=text, catch_exceptions=False,
                                env={"HYPHA_BROKER_URL": None, "HYPHA_STORE_URL": fresh})
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"imported 1 runs ({len(demo_run.events)} events)")


def test_export_selects_runs(tmp_path: Path) -> None:
    from tests.store.test_imports import make_run

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = EventStore(url)
    try:
        old = make_run(store, user="ann", session="s:1", ts=1_600_000_000.0)
        mine = make_run(store, user="ann", session="s:1")
        other = make_run(store, user="bob", session="s:1")
    finally:
        store.dispose()

    def runs_of(*args: str) -> list[str]:
        result = invoke("export", *args, store_url=url)
        assert result.exit_code == 0, result.output
        evs = [Event.model_validate_json(line) for line in result.stdout.splitlines()]
        assert f"exported {len(evs)} events of" in result.stderr
        return list(dict.fromkeys(e.run_id for e in evs))

    assert runs_of() == [old, mine, other]
    assert runs_of("--run", other, "--run", old) == [other, old]
    assert runs_of(mine, "--run", old) == [mine, old]
    assert runs_of("--session", "ann:s:1") == [old, mine]
    # old's last event is at 1,600,000,003 = 2020-09-13T12:26:43Z
    assert runs_of("--since", "2020-09-13T12:26:43Z") == [old, mine, other]
    assert runs_of("--since", "2020-09-13T14:26:43.5+02:00") == [mine, other]
    assert runs_of("--since", "1600000004", "--session", "ann:s:1") == [mine]
    assert runs_of("--session", "nobody:s") == []


@pytest.mark.parametrize(("content", "error_class", "needle"), [
    ("", "EmptyImport", "in.jsonl: no events"),
    ("\n\n", "EmptyImport", "in.jsonl: no events"),
    ("{not json\n", "MalformedLine", "in.jsonl:1: not a hypha event (Invalid JSON"),
    ('{"type": "run.exploded"}\n', "UnknownEventType", "in.jsonl:1: unknown event type"),
    ("TAMPER", "ChecksumMismatch", "in.jsonl:4: checksum mismatch: event"),
    ("GAP", "IncompleteRun", "in.jsonl:4: run"),
])
def test_bad_import_files_are_one_line_errors_and_import_nothing(
    demo_run: DemoRun, tmp_path: Path, content: str, error_class: str, needle: str,
) -> None:
    lines = invoke("export", store_url=demo_run.store_url).stdout.splitlines(keepends=True)
    if content == "TAMPER":
        content = "".join(lines).replace('"node_id":"classify"', '"node_id":"classifx"', 1)
    elif content == "GAP":
        content = "".join(lines[:3] + lines[4:])
    bad = tmp_path / "in.jsonl"
    bad.write_text(content)
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = invoke("import", str(bad), store_url=fresh)
    error = one_line_error(result, 1)
    assert needle in error, error
    assert not (tmp_path / "fresh.db").exists()  # checked before the store is opened
    with pytest.raises(getattr(errors, error_class)), bad.open("rb") as file:
        parse_jsonl(file, str(bad))


def test_an_import_conflict_is_a_one_line_error(demo_run: DemoRun, tmp_path: Path) -> None:
    text = invoke("export", store_url=demo_run.store_url).stdout
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    first = tmp_path / "first.jsonl"
    first.write_text(text)
    assert invoke("import", str(first), store_url=fresh).exit_code == 0
    lines = text.splitlines()
    event = Event.model_validate_json(lines[1])
    lines[1] = dump_line(event.model_copy(update={"timestamp": event.timestamp + 1}))
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join(lines) + "\n")
    error = one_line_error(invoke("import", str(changed), store_url=fresh), 1)
    assert f"changed.jsonl:2: event {demo_run.run_id}:2 differs from the one the store has " \
           "under that id (timestamp); nothing was imported" in error


@pytest.mark.parametrize(("args", "code", "needle"), [
    (["status", "no-such-run"], 1, "no run 'no-such-run'"),
    (["events", "no-such-run"], 1, "no run 'no-such-run'"),
    (["events", "no-such-run", "--follow"], 1, "no run 'no-such-run'"),
    (["cancel", "no-such-run"], 1, "no run 'no-such-run'"),
    (["export", "no-such-run"], 1, "no run 'no-such-run'"),
    (["run", "support", "--app", "examples.support:hypha", "--input", "{bad"], 2,
     "Invalid value for '--input': not valid JSON"),
    (["run", "support", "--app", "examples.support:hypha", "--input", "@/no/such/file"], 2,
     "cannot read /no/such/file"),
    (["run", "support", "--app", "no_such_module_xyz:hypha"], 1, "no module named"),
    (["run", "support", "--app", "examples.support"], 1, "MODULE:ATTR"),
    (["run", "support", "--app", "examples.support:celery"], 1, "not a Hypha instance"),
    (["run", "nope", "--app", "examples.support:hypha"], 1, "no graph 'nope' is registered"),
    (["run", "support"], 2, "Missing option '--app'"),
    (["status", "x", "--app", "examples.support:nope"], 1, "has no attribute 'nope'"),
    (["import", "/no/such/file.jsonl"], 1, "/no/such/file.jsonl: cannot read it: No such file"),
    (["export", "--session", "nocolon"], 2, "Invalid value for '--session'"),
    (["export", "--since", "last tuesday"], 2, "Invalid value for '--since'"),
    (["export", "--run", "no-such-run"], 1, "no run 'no-such-run'"),
    (["worker", "--app", "examples.support:hypha"], 1, "needs a broker"),
    (["worker", "--app", "examples.support:hypha", "--pool", "eventlet"], 2, "--pool"),
    (["frobnicate"], 2, "No such command 'frobnicate'"),
    (["status"], 2, "Missing argument 'RUN_ID'"),
])
def test_errors_are_one_line_without_traceback(
    demo_run: DemoRun, monkeypatch: pytest.MonkeyPatch, args: list[str], code: int, needle: str
) -> None:
    monkeypatch.chdir(ROOT)
    error = one_line_error(invoke(*args, store_url=demo_run.store_url), code)
    assert needle in error


def test_help_and_version() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("demo", "run", "status", "events", "cancel", "export", "import", "worker"):
        assert command in result.stdout
    assert invoke("--version").stdout.strip() == "hypha, version 0.1.0"


def test_the_console_script_prints_one_line_and_exits_1(tmp_path: Path) -> None:
    env = clean_env(HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'x.db'}")
    assert "no run 'nope'" in assert_one_line_error(hypha("status", "nope", env=env))
    assert_one_line_error(hypha("run", "support", "--input", "[", env=env), 2)


def test_run_on_the_embedded_default_waits_in_process(tmp_path: Path) -> None:
    env = clean_env(PYTHONPATH=str(ROOT))
    proc = hypha("run", "support", "--app", "examples.support:hypha",
                 "--input", '{"question": "why a double charge?"}', cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    run_id, _, result = proc.stdout.partition("\n")
    assert len(run_id) == 32
    assert json.loads(result) == {"answer": "billing: 14 hits",
                                  "sources": ["faq", "tickets", "wiki"]}
    assert "executes in this process" in proc.stderr
    failed = hypha("run", "support", "--app", "examples.support:hypha", "--input", "{}",
                   cwd=tmp_path, env=env)
    assert failed.returncode == 1
    note, error = failed.stderr.splitlines()  # the embedded note, then the one error line
    assert "executes in this process" in note
    assert error.startswith("hypha: error: run ")
    assert "failed: node_failed: classify: ValueError" in error
    assert "Traceback" not in failed.stderr


def test_unreachable_services_are_one_line_errors(tmp_path: Path) -> None:
    down = invoke("status", "x", store_url="postgresql+psycopg://nobody@127.0.0.1:1/x")
    assert "event store unavailable: connection failed" in one_line_error(down, 1)
    env = clean_env(HYPHA_BROKER_URL="redis://127.0.0.1:1/0",
                    HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'x.db'}")
    no_broker = hypha("run", "support", "--app", "examples.support:hypha", "--input", "{}",
                      env=env)
    assert "broker unavailable" in assert_one_line_error(no_broker)
