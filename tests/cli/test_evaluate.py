"""``hypha capture | compare | eval | regress`` against real stores (in-process through
the ``hypha`` group's error handling; one run through a real process)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hypha_celery import Event
from hypha_celery.cli import cli
from hypha_celery.cli.evaluate import COMMANDS
from hypha_celery.replay import read_fixture
from hypha_celery.store import EventStore
from tests.cli.helpers import ROOT, assert_one_line_error, clean_env
from tests.replay.support import ANSWER_CONTRACT, agent_graph, app, finished, linear_graph


def invoke(store_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={
        "HYPHA_STORE_URL": store_url, "HYPHA_BROKER_URL": None, "HYPHA_APP": None})


def events_of(store_url: str, run_id: str) -> list[Event]:
    store = EventStore(store_url)
    try:
        return store.events(run_id)
    finally:
        store.dispose()


def one_line_error(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hypha: error: ")
    assert isinstance(result.exception, SystemExit)  # never a traceback
    return lines[0]


@dataclass(frozen=True)
class Runs:
    store_url: str
    agent: str
    old: str  # linear graph, answer "ok"
    new: str  # linear graph, answer "changed"


@pytest.fixture
def runs(store_url: str) -> Iterator[Runs]:
    with app(store_url, agent_graph, linear_graph()) as hypha:
        agent, old = finished(hypha, "agent"), finished(hypha, "linear")
    with app(store_url, linear_graph(answer="changed")) as hypha:
        new = finished(hypha, "linear")
    yield Runs(store_url, agent, old, new)


def test_commands_are_registered_on_hypha() -> None:
    names = [c.name for c in COMMANDS]
    assert names == ["capture", "compare", "eval", "regress"]
    assert all(cli.commands[name] is command for name, command in zip(names, COMMANDS,
                                                                      strict=True))


def test_capture_then_compare(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "fx" / "old.replay.json"
    result = invoke(runs.store_url, "capture", runs.old, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"captured run {runs.old} as fixture {runs.old}: {len(read_fixture(out).events)} "
        "events, state path classify -> respond", f"wrote {out}"]
    assert out.read_text().endswith("}\n")
    assert events_of(runs.store_url, runs.old)[-1].type == "replay.completed"

    same = invoke(runs.store_url, "compare", str(out), runs.old, "--same-run")
    assert same.exit_code == 0, same.output
    lines = same.stdout.splitlines()
    assert [line.split()[:2] for line in lines[:10]] == [
        [f, "ok"] for f in ("event_types", "state_path", "tool_calls", "model_calls",
                            "policy_decisions", "memory_read_set", "skill_activations",
                            "context_hashes", "reasoning_decisions", "output")]
    assert lines[10].endswith(": no differences")

    changed = invoke(runs.store_url, "compare", str(out), runs.new)
    assert changed.exit_code == 1
    output_line = next(line for line in changed.stdout.splitlines()
                       if line.startswith("output"))
    assert output_line.split()[1] == "DIFFERS"
    assert 'expected {"answer":"ok"}, got {"answer":"changed"}' in output_line
    assert changed.stdout.splitlines()[-1].endswith("1 of 10 families differ")

    as_json = invoke(runs.store_url, "compare", str(out), runs.new, "--json")
    assert as_json.exit_code == 1
    diff = json.loads(as_json.stdout)
    assert diff["passed"] is False and diff["output"]["actual"] == {"answer": "changed"}

    other = invoke(runs.store_url, "compare", str(out), runs.new, "--same-run")
    assert f"captured from run {runs.old}, not {runs.new}" in one_line_error(other)


def test_capture_with_a_spec_and_a_contract(runs: Runs, tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"capture_tool_io": False, "snapshot_policy": "full"}))
    contract = tmp_path / "answer.json"
    contract.write_text(json.dumps(ANSWER_CONTRACT))
    out = tmp_path / "agent.replay.json"
    result = invoke(runs.store_url, "capture", runs.agent, "-o", str(out), "--spec", str(spec),
                    "--contract", str(contract), "--id", "agent-golden")
    assert result.exit_code == 0, result.output
    fixture = read_fixture(out)
    assert fixture.id == "agent-golden" and fixture.tool_calls == []
    assert fixture.model_calls and fixture.snapshots
    assert fixture.output_contract == ANSWER_CONTRACT


def test_capture_errors(runs: Runs, tmp_path: Path) -> None:
    out = str(tmp_path / "x.replay.json")
    missing = invoke(runs.store_url, "capture", "no-such-run", "--out", out)
    assert "no run 'no-such-run' in the event store" in one_line_error(missing)
    bad_spec = tmp_path / "spec.json"
    bad_spec.write_text('{"capture_everything": true}')
    usage = invoke(runs.store_url, "capture", runs.old, "--out", out, "--spec", str(bad_spec))
    assert "is not a replay spec (capture_everything: Extra inputs" in one_line_error(usage, 2)
    bad_spec.write_text("{not json")
    assert "is not valid JSON" in one_line_error(
        invoke(runs.store_url, "capture", runs.old, "--out", out, "--spec", str(bad_spec)), 2)
    blocker = tmp_path / "file"
    blocker.write_text("")
    unwritable = invoke(runs.store_url, "capture", runs.old, "--out", str(blocker / "x.json"))
    one_line_error(unwritable)
    assert events_of(runs.store_url, runs.old)[-1].type == "replay.failed"


def test_compare_errors(runs: Runs, tmp_path: Path) -> None:
    bad = tmp_path / "bad.replay.json"
    bad.write_text("{}")
    assert "not a replay fixture" in one_line_error(
        invoke(runs.store_url, "compare", str(bad), runs.old))
    assert "does not exist" in one_line_error(
        invoke(runs.store_url, "compare", str(tmp_path / "none.json"), runs.old), 2)
    fixture = tmp_path / "f.replay.json"
    assert invoke(runs.store_url, "capture", runs.old, "-o", str(fixture)).exit_code == 0
    assert "no run 'nope'" in one_line_error(
        invoke(runs.store_url, "compare", str(fixture), "nope"))


def test_eval(runs: Runs, tmp_path: Path) -> None:
    contract = tmp_path / "answer.json"
    contract.write_text(json.dumps(ANSWER_CONTRACT))
    good = invoke(runs.store_url, "eval", runs.agent, "--contract", str(contract),
                  "--require", "model.call.completed", "--require", "tool.call.completed")
    assert good.exit_code == 0, good.output
    rows = [line.split()[:3] for line in good.stdout.splitlines()]
    assert rows[0] == ["result", "check", "result"]
    assert rows[1:3] == [["answer:output-contract", "answer:schema", "pass"],
                         ["trace.completeness", "trace.complete", "pass"]]
    assert good.stdout.splitlines()[-1] == "passed (score 1.00, 2 results)"
    tail = [e.type for e in events_of(runs.store_url, runs.agent)[-2:]]
    assert tail == ["eval.started", "eval.completed"]

    bad = invoke(runs.store_url, "eval", runs.old, "--contract", str(contract),
                 "--require", "model.call.completed", "--json")
    assert bad.exit_code == 1
    summary = json.loads(bad.stdout)
    assert summary["status"] == "failed"
    assert [c["id"] for r in summary["results"] for c in r["checks"]] == [
        "answer:schema", "trace.required.model.call.completed"]


def test_eval_errors(runs: Runs, tmp_path: Path) -> None:
    assert "unknown event type 'model.called'" in one_line_error(
        invoke(runs.store_url, "eval", runs.old, "--require", "model.called"), 2)
    broken = tmp_path / "broken.json"
    broken.write_text('{"type": "strung"}')
    assert "output contract 'broken' is not a valid JSON Schema" in one_line_error(
        invoke(runs.store_url, "eval", runs.old, "--contract", str(broken)))
    assert "no run" in one_line_error(invoke(runs.store_url, "eval", "nope"))


def test_regress(runs: Runs, tmp_path: Path) -> None:
    fixtures = tmp_path / "fixtures"
    for run_id in (runs.agent, runs.old):
        assert invoke(runs.store_url, "capture", run_id, "-o",
                      str(fixtures / f"{run_id}.replay.json")).exit_code == 0
    spec = tmp_path / "ci" / "regression.yaml"
    spec.parent.mkdir()
    spec.write_text(f"id: ci\nfixtures: [{runs.agent}, {runs.old}]\n"
                    "required_checks: [event_types, state_path, output, trace_completeness]\n")
    ok = invoke(runs.store_url, "regress", str(spec), "--fixtures-dir", str(fixtures))
    assert ok.exit_code == 0, ok.output
    lines = ok.stdout.splitlines()
    assert lines[0].split() == ["case", "check", "result", "detail"]
    assert [line.split()[1:3] for line in lines[1:5]] == [
        ["event_types", "pass"], ["state_path", "pass"], ["output", "pass"],
        ["trace_completeness", "pass"]]
    assert lines[-1] == "regression ci: 2 cases, 2 passed, 0 failed"

    spec.write_text(f"id: ci\nfixtures: [{runs.old}, gone]\nruns:\n  {runs.old}: {runs.new}\n"
                    "required_checks: [state_path, output]\n")
    failing = invoke(runs.store_url, "regress", str(spec), "--fixtures-dir", str(fixtures))
    assert failing.exit_code == 1
    rows = [line.split()[:3] for line in failing.stdout.splitlines()[1:-1]]
    assert rows == [[f"ci:{runs.old}", "state_path", "pass"], [f"ci:{runs.old}", "output", "FAIL"],
                    ["missing:gone", "state_path", "FAIL"], ["missing:gone", "output", "FAIL"]]
    assert failing.stdout.splitlines()[-1] == "regression ci: 2 cases, 0 passed, 2 failed"
    report = json.loads(invoke(runs.store_url, "regress", str(spec), "--fixtures-dir",
                               str(fixtures), "--json").stdout)
    assert report["summary"] == {"total": 2, "passed": 0, "failed": 2}


def test_regress_errors(runs: Runs, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("id: x\nfixtures: []\n")
    assert "fixtures: List should have at least 1 item" in one_line_error(
        invoke(runs.store_url, "regress", str(spec)))
    assert "does not exist" in one_line_error(
        invoke(runs.store_url, "regress", str(tmp_path / "none.yaml")), 2)


_SCRIPT = """
import sys
from hypha_celery.cli import cli
cli.main(sys.argv[1:], prog_name="hypha")
"""


def test_a_real_process_gets_one_line_and_exit_codes(runs: Runs, tmp_path: Path) -> None:
    def hypha(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", _SCRIPT, *args], cwd=ROOT,
                              env=clean_env(HYPHA_STORE_URL=runs.store_url),
                              capture_output=True, text=True, timeout=60)

    fixture = tmp_path / "old.replay.json"
    assert hypha("capture", runs.old, "-o", str(fixture)).returncode == 0
    assert hypha("compare", str(fixture), runs.old).returncode == 0
    differs = hypha("compare", str(fixture), runs.new)
    assert differs.returncode == 1 and differs.stderr == ""
    missing = hypha("eval", "no-such-run")
    assert "no run 'no-such-run'" in assert_one_line_error(missing)
