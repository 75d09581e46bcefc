"""Pack test runs (``run_cases``) on the embedded runtime, real runs: every case of the
example pack passes; a broken contract fails, a raising node, a run held for a review and
a run past its timeout are errors (cancelled, never an exception); a regression case
compares with its first run or with a captured fixture; a case naming a missing workflow
is a PackError before anything runs; the JUnit XML parses and says the same."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from hypha_celery import Hypha
from hypha_celery.errors import PackError
from hypha_celery.packs import (
    DEFAULT_CASE_TIMEOUT,
    MAX_CASES,
    CaseKind,
    CaseStatus,
    DomainPack,
    PackCase,
    PackTestReport,
    compile_all,
    junit_xml,
    load_pack,
    overlay,
    run_cases,
    write_junit,
)
from hypha_celery.replay import capture, write_fixture
from tests.packs import EXAMPLE
from tests.runtime.support import running

CASEWORK = Path(__file__).with_name("casework.yaml")


@pytest.fixture(scope="module")
def casework() -> DomainPack:
    return load_pack(CASEWORK)


@pytest.fixture
def host(sqlite_url: str, casework: DomainPack) -> Iterator[Hypha]:
    with running(sqlite_url) as app:
        for graph in compile_all(casework).values():
            app.register(graph)
        yield app


def by_id(report: PackTestReport) -> dict[str, tuple[CaseStatus, str]]:
    return {c.id: (c.status, c.message) for c in report.cases}


def test_every_case_of_the_example_pack_passes(store_url: str) -> None:
    pack = load_pack(EXAMPLE)
    with running(store_url) as app:
        app.register(compile_all(pack)["support-triage"])
        seen: list[str] = []
        report = run_cases(pack, app, on_start=lambda kind, case: seen.append(case.id))
        assert report.passed, report.cases
        assert seen == ["password-question", "complaint", "close-account",
                        "password-question-path"]
        assert report.summary == {"total": 4, "passed": 4, "failed": 0, "errors": 0}
        evaluation, regression = report.cases[0], report.cases[3]
        assert [c.id for c in evaluation.checks] == ["reply:schema", "trace.complete"]
        assert [c.id for c in regression.checks] == [
            "regression.event_types", "regression.state_path", "regression.tool_calls",
            "regression.output"]
        assert len(regression.run_ids) == 2  # a first run, then the compared one
        kinds = [e.kind for e in app.get_run(evaluation.run_ids[0]).events()]
        assert kinds[-2:] == ["eval.started", "eval.completed"]
        compared = [e.kind for e in app.get_run(regression.run_ids[1]).events()]
        assert compared[-2:] == ["regression.started", "regression.completed"]


def test_failures_and_errors_are_verdicts_not_exceptions(host: Hypha,
                                                         casework: DomainPack) -> None:
    report = run_cases(casework, host, timeout=2)
    found = by_id(report)
    assert found["echoes"] == (CaseStatus.PASSED, "")
    status, message = found["breaks-contract"]
    assert status is CaseStatus.FAILED
    assert message.startswith("strict:schema:")
    assert "'never' is a required property" in message
    status, message = found["raises"]
    assert status is CaseStatus.ERROR
    assert message.endswith("failed: node_failed: boom: RuntimeError: the boom node always "
                            "fails")
    status, message = found["too-slow"]
    assert status is CaseStatus.ERROR
    assert message.endswith("still running after 2s (cancelled)")
    (slow,) = [c for c in report.cases if c.id == "too-slow"]
    assert host.get_run(slow.run_ids[0]).status().status in ("cancelled", "running")
    assert found["echo-path"] == (CaseStatus.PASSED, "")
    status, message = found["dice-output"]
    assert status is CaseStatus.FAILED  # a new text each run: not reproducible
    assert message.startswith("regression.output:")
    assert report.summary == {"total": 6, "passed": 2, "failed": 2, "errors": 2}
    assert not report.passed


def test_a_run_held_for_a_review_is_an_error_at_once(sqlite_url: str) -> None:
    pack = overlay(load_pack(EXAMPLE), {"evaluation_cases": [
        {"id": "refund", "workflow": "support-triage",
         "input": {"text": "refund please", "order": "A-1"}}]})
    with running(sqlite_url) as app:
        app.register(compile_all(pack)["support-triage"])
        report = run_cases(pack, app, only=["refund"], timeout=30)
    (case,) = report.cases
    assert case.status is CaseStatus.ERROR
    assert case.message.endswith("is waiting_human: a case runs to its end unattended (no "
                                 "human review, nothing held)")
    assert case.duration < 10  # not the timeout


def test_a_regression_case_compares_with_its_fixture(host: Hypha, casework: DomainPack,
                                                     tmp_path: Path) -> None:
    first = host.start("echo", {"text": "hi"})
    first.wait(30)
    write_fixture(capture(first.events(), fixture_id="echo-hi"),
                  tmp_path / "echo-hi.replay.json")
    pack = overlay(casework, {"regression_cases": [
        {"id": "same", "workflow": "echo", "input": {"text": "hi"},
         "fixture": "echo-hi.replay.json", "checks": ["state_path", "output"]},
        {"id": "other-text", "workflow": "echo", "input": {"text": "bye"},
         "fixture": "echo-hi.replay.json", "checks": ["state_path", "output"]},
        {"id": "no-file", "workflow": "echo", "input": {}, "fixture": "nope.json"}]})
    report = run_cases(pack, host, only=["same", "other-text", "no-file"],
                       base_dir=tmp_path)
    found = by_id(report)
    assert found["same"] == (CaseStatus.PASSED, "")
    assert found["other-text"][0] is CaseStatus.FAILED
    assert found["other-text"][1].startswith("regression.output:")
    assert found["no-file"][0] is CaseStatus.ERROR
    assert "nope.json" in found["no-file"][1]
    assert len(report.cases[0].run_ids) == 1  # the fixture is the baseline


def test_a_case_naming_a_missing_workflow_runs_nothing(host: Hypha,
                                                       casework: DomainPack) -> None:
    doc = casework.to_doc()
    doc["evaluation_cases"] = [{"id": "lost", "workflow": "nope", "input": {}}]
    unchecked = DomainPack.model_validate(doc)  # shape only: the reference is not checked
    before = len(host.store.list_runs(limit=1000))
    with pytest.raises(PackError) as info:
        run_cases(unchecked, host)
    assert info.value.problems == [(
        "evaluation_cases[0].workflow",
        "unknown workflow 'nope' (known: boom, dice, echo, slow)")]
    assert len(host.store.list_runs(limit=1000)) == before  # nothing started
    with pytest.raises(PackError, match="no case 'nope' in pack casework@1.0"):
        run_cases(casework, host, only=["nope"])
    with pytest.raises(PackError, match="a case timeout is more than 0"):
        run_cases(casework, host, timeout=0)


def test_the_bounds_are_stated() -> None:
    assert (MAX_CASES, DEFAULT_CASE_TIMEOUT) == (1_000, 60.0)
    too_many = [PackCase(id=f"c{i}", workflow="echo") for i in range(MAX_CASES + 1)]
    pack = load_pack(CASEWORK).model_copy(update={"evaluation_cases": too_many})
    with pytest.raises(PackError, match="1003 cases: a pack test runs at most 1000"):
        run_cases(pack, None)  # type: ignore[arg-type]  # refused before the host is used


def test_an_evaluation_case_takes_no_checks_or_fixture(casework: DomainPack) -> None:
    doc = casework.to_doc()
    doc["evaluation_cases"][0]["checks"] = ["state_path"]
    with pytest.raises(PackError) as info:
        overlay(casework, {"evaluation_cases": doc["evaluation_cases"]})
    assert info.value.problems[0][0] == "evaluation_cases[0].checks"


def test_junit_xml_parses_and_names_failures_and_errors(host: Hypha, casework: DomainPack,
                                                        tmp_path: Path) -> None:
    report = run_cases(casework, host, timeout=2)
    out = tmp_path / "reports"
    out.mkdir()
    path = write_junit(report, out / "junit.xml")
    assert [p.name for p in out.iterdir()] == ["junit.xml"]  # no temporary file left
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures"),
            suite.get("errors")) == ("casework@1.0", "6", "2", "2")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["echoes", "breaks-contract", "raises", "too-slow", "echo-path",
                           "dice-output"]
    assert cases["echoes"].get("classname") == "casework@1.0.evaluation"
    assert cases["echo-path"].get("classname") == "casework@1.0.regression"
    assert cases["echoes"].find("failure") is None and cases["echoes"].find("error") is None
    failure = cases["breaks-contract"].find("failure")
    assert failure is not None and (failure.get("type") or "").startswith("strict:schema")
    error = cases["raises"].find("error")
    assert error is not None and "the boom node always fails" in (error.get("message") or "")
    assert cases["too-slow"].find("error") is not None
    assert junit_xml(report) == path.read_text(encoding="utf-8")
    assert {k.value for k in CaseKind} == {"evaluation", "regression"}
