"""``hypha pack validate | show``, ``hypha run --pack`` and ``hypha review`` through the
real console script, on the embedded default: a run parked for a review in one process
is approved (and finished) by another."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.cli.helpers import ROOT, assert_one_line_error, clean_env, hypha
from tests.runtime.support import running

PACK = "examples/packs/support_triage/pack.yaml"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Commands run from the repository root (the pack's code refs are imported from
    there); the store is this test's own SQLite file."""
    return clean_env(HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'hypha.db'}")


def lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return proc.stdout.splitlines()


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr


def test_validate_a_good_pack() -> None:
    proc = hypha("pack", "validate", PACK)
    assert proc.returncode == 0, proc.stderr
    assert lines(proc) == ["ok support-triage@1.0.0: 1 workflow, 3 tools"]


def test_validate_prints_every_problem_on_its_own_line(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / PACK).read_text(encoding="utf-8"))
    doc["workflows"][0]["transitions"][1]["guard"] = "intent == 'refund' &&"
    doc["nodes"]["refund"]["tool"] = "billing.refunds"
    doc["nodes"]["classify"]["code"] = "examples.packs.support_triage.nodes:nope"
    doc["default_workflow"] = "triage"
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(doc), encoding="utf-8")
    proc = hypha("pack", "validate", str(broken))
    assert proc.returncode == 1
    no_traceback(proc)
    assert sorted(lines(proc)) == sorted([
        f"{broken}: workflows[0].transitions[1].guard: expected a condition, found end of "
        "guard at character 21",
        f"{broken}: nodes.refund.tool: unknown tool 'billing.refunds' (known: "
        "accounts.close, billing.refund, kb.search)",
        f"{broken}: default_workflow: unknown workflow 'triage' (known: support-triage)"])
    doc["nodes"]["refund"]["tool"] = "billing.refund"
    doc["default_workflow"] = "support-triage"
    doc["workflows"][0]["transitions"][1]["guard"] = "intent == 'refund'"
    broken.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code = hypha("pack", "validate", str(broken))  # now the code is imported: one problem
    assert code.returncode == 1
    assert lines(code) == [f"{broken}: nodes.classify.code: module "
                           "'examples.packs.support_triage.nodes' has no attribute 'nope'"]
    missing = hypha("pack", "validate", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 1
    assert lines(missing) == [f"{tmp_path / 'nope.yaml'}: cannot read it: No such file or "
                              "directory"]


def test_show_summarizes_and_dumps_the_pack() -> None:
    proc = hypha("pack", "show", PACK)
    assert proc.returncode == 0, proc.stderr
    out = lines(proc)
    assert out[0] == "pack      support-triage@1.0.0  Support triage"
    assert "human review on entering Refund" in proc.stdout
    assert "tool      accounts.close  irreversible  mock" in out
    as_json = hypha("pack", "show", PACK, "--json")
    assert json.loads(as_json.stdout)["tools"][1]["handler"] == (
        "examples.packs.support_triage.nodes:refund")


def test_run_a_pack_answers(env: dict[str, str]) -> None:
    proc = hypha("run", "--pack", PACK, "--input", '{"text": "how do I reset my password?"}',
                 env=env)
    assert proc.returncode == 0, proc.stderr
    run_id, _, result = proc.stdout.partition("\n")
    assert len(run_id) == 32
    reply = json.loads(result)
    assert reply["kind"] == "answer" and reply["message"].startswith("Resetting your password")
    assert "executes in this process" in proc.stderr


def test_run_a_pack_checks_its_input_first(env: dict[str, str]) -> None:
    proc = hypha("run", "--pack", PACK, "--input", '{"order": "nope"}', env=env)
    assert proc.returncode == 1
    no_traceback(proc)
    assert proc.stderr.splitlines() == [
        "hypha: error: --input does not match task schema 'ticket': $.order: 'nope' does not "
        "match '^[A-Z]-[0-9]{1,10}$'",
        "hypha: error: --input does not match task schema 'ticket': $.text: 'text' is a "
        "required property"]
    assert proc.stdout == ""  # no run was started
    wrong = hypha("run", "--pack", PACK, "--workflow", "nope", "--input", "{}", env=env)
    assert "Invalid value for '--workflow': pack support-triage@1.0.0 has no workflow " \
        "'nope'" in assert_one_line_error(wrong, 2)
    both = hypha("run", "support", "--pack", PACK, env=env)
    assert "not both" in assert_one_line_error(both, 2)


def test_a_refund_parks_then_a_second_process_approves_it(env: dict[str, str]) -> None:
    started = hypha("run", "--pack", PACK, "--input",
                    '{"text": "I was charged twice, refund please", "order": "B-42"}',
                    "--user", "u1", "--session", "s1", env=env)
    assert started.returncode == 0, started.stderr
    run_id, waiting, approve, reject = lines(started)
    assert waiting == (f"waiting_human: review {run_id}.r1: a refund moves money: a person "
                       "approves it (Route -> Refund)")
    assert approve == f"approve: hypha review approve {run_id} --pack {PACK}"
    assert reject == f"reject:  hypha review reject {run_id} --reason TEXT --pack {PACK}"

    listed = hypha("review", "list", "--json", env=env)
    (pending,) = [json.loads(line) for line in lines(listed)]
    assert (pending["run_id"], pending["graph_id"], pending["user_id"]) == (
        run_id, "support-triage", "u1")

    blind = hypha("review", "approve", run_id, env=env)  # this process can't run it on
    assert "pass --pack FILE" in assert_one_line_error(blind, 2)

    approved = hypha("review", "approve", run_id, "--pack", PACK, "--by", "alice", env=env)
    assert approved.returncode == 0, approved.stderr
    head, _, result = approved.stdout.partition("{")
    assert head.splitlines() == [f"approved review {run_id}.r1 of run {run_id}",
                                 f"run {run_id} completed"]
    assert json.loads("{" + result)["kind"] == "refund"

    again = hypha("review", "approve", run_id, "--pack", PACK, env=env)
    assert f"run {run_id} is completed, not waiting for a review" in \
        assert_one_line_error(again, 1)

    with running(env["HYPHA_STORE_URL"]) as app:
        events = app.get_run(run_id).events()
    kinds = [e.kind for e in events]
    by = [e.data["by"] for e in events if e.kind == "human.review.approved"]
    assert kinds.count("tool.call.started") == 1  # the refund ran exactly once
    assert by == ["alice"]


def test_a_rejected_review_ends_the_run(env: dict[str, str]) -> None:
    started = hypha("run", "--pack", PACK, "--input",
                    '{"text": "refund please", "order": "C-7"}', env=env)
    run_id = lines(started)[0]
    rejected = hypha("review", "reject", run_id, "--reason", "too late", "--pack", PACK,
                     env=env)
    assert rejected.returncode == 0, rejected.stderr
    assert lines(rejected) == [f"rejected review {run_id}.r1 of run {run_id}",
                               f"run {run_id} failed"]
    status = hypha("status", run_id, "--json", env=env)
    assert json.loads(status.stdout)["error"]["reason"] == "review_rejected"


def test_an_invalid_pack_never_runs(env: dict[str, str], tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / PACK).read_text(encoding="utf-8"))
    doc["nodes"]["refund"]["tool"] = "billing.refunds"
    doc["tools"][0]["side_effect"] = "explosive"
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(doc), encoding="utf-8")
    proc = hypha("run", "--pack", str(broken), "--input", '{"text": "hi"}', env=env)
    assert proc.returncode == 1
    no_traceback(proc)
    errors = proc.stderr.splitlines()
    assert len(errors) == 2 and all(e.startswith(f"hypha: error: {broken}: ") for e in errors)
    assert proc.stdout == ""
