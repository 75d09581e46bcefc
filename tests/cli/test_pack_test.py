"""``hypha pack test`` through the real console script: embedded by default (a table,
exit 0 when every case passes, 1 otherwise, JUnit XML that parses), a case naming a
missing workflow is one error line and writes nothing, and on a real Redis broker with a
real ``celery worker`` process when HYPHA_BROKER_URL is set."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hypha_celery.testing.worker import WorkerProcess, fresh_store_url
from tests.cli.helpers import ROOT, assert_one_line_error, clean_env, hypha

EXAMPLE = "examples/packs/support_triage/pack.yaml"
CASEWORK = "tests/packs/casework.yaml"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return clean_env(HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'hypha.db'}")


def suite_of(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    (suite,) = root.findall("testsuite")
    return suite


def counts(suite: ET.Element) -> tuple[str | None, ...]:
    return tuple(suite.get(k) for k in ("name", "tests", "failures", "errors"))


def verdict(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout.splitlines()[-1]


def test_the_example_pack_passes(env: dict[str, str], tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    proc = hypha("pack", "test", EXAMPLE, "--junit-xml", str(junit), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdict(proc).startswith("support-triage@1.0.0: 4 cases, 4 passed, 0 failed, "
                                    "0 errors in ")
    rows = [line for line in proc.stdout.splitlines() if "support-triage │" in line]
    assert [r.split("│")[2].strip() for r in rows] == [
        "password-question", "complaint", "close-account", "password-question-path"]
    assert all(r.split("│")[4].strip() == "passed" for r in rows)
    assert proc.stderr.strip() == f"wrote {junit}"  # the progress display is transient
    suite = suite_of(junit)
    assert counts(suite) == ("support-triage@1.0.0", "4", "0", "0")
    assert [c.get("name") for c in suite.iter("testcase")] == [
        "password-question", "complaint", "close-account", "password-question-path"]


def test_failures_exit_1_and_land_in_the_junit_xml(env: dict[str, str],
                                                   tmp_path: Path) -> None:
    junit = tmp_path / "out" / "junit.xml"
    junit.parent.mkdir()
    proc = hypha("pack", "test", CASEWORK, "--timeout", "2", "--junit-xml", str(junit),
                 env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert verdict(proc).startswith("casework@1.0: 6 cases, 2 passed, 2 failed, 2 errors")
    suite = suite_of(junit)
    assert counts(suite) == ("casework@1.0", "6", "2", "2")
    verdicts = {c.get("name"): [v.tag for v in c if v.tag in ("failure", "error")]
                for c in suite.iter("testcase")}
    assert verdicts == {"echoes": [], "breaks-contract": ["failure"], "raises": ["error"],
                        "too-slow": ["error"], "echo-path": [], "dice-output": ["failure"]}
    assert [p.name for p in junit.parent.iterdir()] == ["junit.xml"]


def test_json_and_one_case(env: dict[str, str]) -> None:
    proc = hypha("pack", "test", CASEWORK, "--case", "echoes", "--case", "echo-path",
                 "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["summary"] == {"total": 2, "passed": 2, "failed": 0, "errors": 0}
    assert [(c["id"], c["kind"], c["status"]) for c in report["cases"]] == [
        ("echoes", "evaluation", "passed"), ("echo-path", "regression", "passed")]
    unknown = hypha("pack", "test", CASEWORK, "--case", "nope", env=env)
    assert "no case 'nope' in pack casework@1.0" in assert_one_line_error(unknown, 1)


def test_a_case_naming_a_missing_workflow_is_one_error_line(env: dict[str, str],
                                                           tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / CASEWORK).read_text(encoding="utf-8"))
    doc["regression_cases"][0]["workflow"] = "nope"
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(doc), encoding="utf-8")
    junit = tmp_path / "junit.xml"
    proc = hypha("pack", "test", str(broken), "--junit-xml", str(junit), env=env)
    line = assert_one_line_error(proc, 1)
    assert line == (f"hypha: error: {broken}: regression_cases[0].workflow: unknown "
                    "workflow 'nope' (known: boom, dice, echo, slow)")
    assert proc.stdout == ""
    assert not junit.exists()  # nothing half-written
    assert not (tmp_path / "hypha.db").exists()  # nothing ran: no store was opened
    junit.write_text("<old/>", encoding="utf-8")
    again = hypha("pack", "test", str(broken), "--junit-xml", str(junit), env=env)
    assert again.returncode == 1
    assert junit.read_text(encoding="utf-8") == "<old/>"  # an earlier report is kept


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    return int(stat.rpartition(")")[2].split()[1])


@pytest.fixture
def store_url(pg_url: str, tmp_path: Path) -> Iterator[str]:
    with fresh_store_url(tmp_path, pg_url) as url:
        yield url


def test_on_a_broker_the_cases_run_on_a_worker_process(redis_url: str, store_url: str,
                                                       tmp_path: Path) -> None:
    worker = WorkerProcess("tests.cli.pack_app:build", broker_url=redis_url,
                           store_url=store_url, log=tmp_path / "worker.log", cwd=ROOT)
    worker.start()
    try:
        env = clean_env(HYPHA_BROKER_URL=redis_url, HYPHA_RESULT_BACKEND=redis_url,
                        HYPHA_STORE_URL=store_url)
        junit = tmp_path / "junit.xml"
        proc = hypha("pack", "test", CASEWORK, "--case", "echoes", "--case", "echo-path",
                     "--case", "breaks-contract", "--junit-xml", str(junit), env=env)
        assert proc.returncode == 1, proc.stdout + proc.stderr + worker.log()
        assert verdict(proc).startswith("casework@1.0: 3 cases, 2 passed, 1 failed, "
                                        "0 errors"), proc.stdout + worker.log()
        assert counts(suite_of(junit)) == ("casework@1.0", "3", "1", "0")
        runs = worker.client.store.list_runs(limit=10)
        assert len(runs) == 4  # echoes, breaks-contract, echo-path twice
        assert worker.proc is not None
        for row in runs:
            started = [e for e in worker.client.get_run(row.run_id).events()
                       if e.kind == "node.execution.started"]
            assert started
            for event in started:  # "host:pid" of a pool process of the worker
                pid = int(str(event.data["worker"]).rpartition(":")[2])
                assert worker.proc.pid in (pid, parent_of(pid))
    finally:
        worker.stop()
