"""Regression specs (YAML) and run_regression against real stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypha_celery.errors import InvalidRegressionSpec
from hypha_celery.evaluation import DEFAULT_CHECKS, RegressionSpec, run_case, run_regression
from hypha_celery.replay import FileFixtureStore, capture, capture_run, write_fixture
from tests.replay.support import (
    ANSWER_CONTRACT,
    agent_graph,
    app,
    completed_run_events,
    finished,
    linear_graph,
)

ALL_CHECKS = ["event_types", "state_path", "tool_calls", "model_calls", "policy_decisions",
              "memory_read_set", "output", "output_contract", "trace_completeness"]


def test_spec_defaults_and_yaml(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("id: nightly\nfixtures:\n  - run-1\n  - fixtures/other.replay.json\n")
    spec = RegressionSpec.load(path)
    assert spec.required_checks == list(DEFAULT_CHECKS) == ["event_types", "state_path",
                                                            "output_contract"]
    assert spec.runs == {} and spec.base == tmp_path
    dup = RegressionSpec(id="x", fixtures=["a"], required_checks=["output", "output"])
    assert dup.required_checks == ["output"]


@pytest.mark.parametrize(("text", "message"), [
    ("id: x\nfixtures: [a]\nextra: 1\n", "extra: Extra inputs are not permitted"),
    ("id: x\nfixtures: []\n", "fixtures: List should have at least 1 item"),
    ("id: x\nfixtures: [a]\nrequired_checks: []\n", "required_checks: List should have at "
                                                    "least 1 item"),
    ("id: x\nfixtures: [a]\nrequired_checks: [vibes]\n", "required_checks.0: Input should be"),
    ("id: ''\nfixtures: [a]\n", "id: String should have at least 1 character"),
    ("fixtures: [a]\n", "id: Field required"),
    ("id: x\nfixtures: ['  ']\n", "a fixture reference is empty"),
    ("- a list\n", "a regression spec is a mapping"),
    ("id: [unclosed\n", "not valid YAML"),
])
def test_bad_specs(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(InvalidRegressionSpec, match=message.replace("[", r"\[")) as info:
        RegressionSpec.load(path)
    assert str(path) in str(info.value)


def test_run_case_is_pure_and_reports_per_check() -> None:
    fixture = capture(completed_run_events(), output_contract=ANSWER_CONTRACT)
    case = run_case("c", fixture, completed_run_events(), ALL_CHECKS)
    assert case.passed and [c.id for c in case.checks] == [f"regression.{c}" for c in ALL_CHECKS]
    changed = completed_run_events()
    changed[-1] = changed[-1].model_copy(update={"payload": {"result": {"answer": 3}}})
    bad = run_case("c", fixture, changed, ["event_types", "output", "output_contract"])
    assert [(c.id, c.passed) for c in bad.checks] == [
        ("regression.event_types", True), ("regression.output", False),
        ("regression.output_contract", False)]
    assert "$.answer: 3 is not of type 'string'" in bad.checks[2].message
    assert bad.contract is not None and bad.contract.id == "c:output_contract"


def test_without_a_contract_output_contract_compares_outputs() -> None:
    fixture = capture(completed_run_events())
    changed = completed_run_events()
    changed[-1] = changed[-1].model_copy(update={"payload": {"result": "other"}})
    (check,) = run_case("c", fixture, changed, ["output_contract"]).checks
    assert not check.passed and check.message.startswith("no contract in the fixture")


def test_hypha_regression_scenario(store_url: str, tmp_path: Path) -> None:
    """hypha §4 scenario 17: checks [event_types, state_path, policy_decisions,
    output_contract] on the fixture pass, summary {1, 1, 0}, one regression.completed."""
    with app(store_url, agent_graph) as hypha:
        run_id = finished(hypha, "agent", {"q": "refund"})
        capture_run(hypha.store, run_id, fixture_id="fixture.default",
                    output_contract=ANSWER_CONTRACT, save=FileFixtureStore(tmp_path).save)
        spec = RegressionSpec(id="regression.event-contract", fixtures=["fixture.default"],
                              required_checks=["event_types", "state_path", "policy_decisions",
                                               "output_contract"])
        report = run_regression(spec, hypha.store, fixtures_dir=tmp_path)
        events = hypha.store.events(run_id)
    assert report.passed and report.summary == {"total": 1, "passed": 1, "failed": 0}
    (case,) = report.cases
    assert case.id == "regression.event-contract:fixture.default" and case.run_id == run_id
    kinds = [e.type for e in events]
    assert kinds.count("regression.completed") == 1 and kinds[-2] == "regression.started"
    assert events[-1].payload == {
        "spec_id": "regression.event-contract", "case_id": case.id,
        "fixture_id": "fixture.default", "status": "passed",
        "checks": {"regression.event_types": True, "regression.state_path": True,
                   "regression.policy_decisions": True, "regression.output_contract": True}}


def test_missing_fixtures_fail_every_required_check(sqlite_url: str, tmp_path: Path) -> None:
    spec = RegressionSpec(id="r", fixtures=["gone", "nowhere/gone.replay.json"],
                          required_checks=["state_path", "trace_completeness"])
    with app(sqlite_url) as hypha:
        report = run_regression(spec, hypha.store, fixtures_dir=tmp_path)
    assert not report.passed and report.summary == {"total": 2, "passed": 0, "failed": 2}
    assert [c.id for c in report.cases] == ["missing:gone", "missing:nowhere/gone.replay.json"]
    for case in report.cases:
        assert [(c.id, c.passed) for c in case.checks] == [
            ("regression.state_path", False), ("regression.trace_completeness", False)]


def test_compare_against_a_run_of_new_code(store_url: str, tmp_path: Path) -> None:
    """``runs`` points a fixture at another run: the new code's output breaks the check."""
    with app(store_url, linear_graph()) as hypha:
        old = finished(hypha, "linear")
        fixture = capture_run(hypha.store, old, output_contract={
            "type": "object", "properties": {"answer": {"const": "ok"}}})
    path = write_fixture(fixture, tmp_path / "fixtures" / "linear.replay.json")
    with app(store_url, linear_graph(answer="changed")) as hypha:
        new = finished(hypha, "linear")
        spec_file = tmp_path / "spec.yaml"
        spec_file.write_text(f"id: upgrade\nfixtures: [fixtures/{path.name}]\n"
                             f"runs:\n  {fixture.id}: {new}\n"
                             f"required_checks: [event_types, state_path, output_contract, "
                             f"trace_completeness]\n")
        report = run_regression(RegressionSpec.load(spec_file), hypha.store)
        old_tail = hypha.store.events(old)[-1].type
        new_tail = hypha.store.events(new)[-1]
    (case,) = report.cases
    assert case.run_id == new and not report.passed
    assert {c.id: c.passed for c in case.checks} == {
        "regression.event_types": True, "regression.state_path": True,
        "regression.output_contract": False, "regression.trace_completeness": True}
    assert old_tail == "replay.completed"  # only the compared run gets regression.*
    assert new_tail.type == "regression.completed" and new_tail.payload["status"] == "failed"


def test_a_run_missing_from_the_store_fails_its_case(sqlite_url: str, tmp_path: Path) -> None:
    store = FileFixtureStore(tmp_path)
    store.save(capture(completed_run_events(), fixture_id="hand"))
    spec = RegressionSpec(id="r", fixtures=["hand"])
    with app(sqlite_url) as hypha:
        (case,) = run_regression(spec, hypha.store, fixtures_dir=tmp_path).cases
    assert not case.passed and case.run_id == "run_replay"
    assert {c.message for c in case.checks} == {"run run_replay is not in the event store"}


def test_runs_must_name_a_fixture(sqlite_url: str, tmp_path: Path) -> None:
    spec = RegressionSpec(id="r", fixtures=["a"], runs={"typo": "run-1"})
    with app(sqlite_url) as hypha, pytest.raises(InvalidRegressionSpec, match="typo"):
        run_regression(spec, hypha.store, fixtures_dir=tmp_path)


def test_every_check_passes_on_a_faithful_rerun(store_url: str, tmp_path: Path) -> None:
    with app(store_url, agent_graph) as hypha:
        run_id = finished(hypha, "agent")
        FileFixtureStore(tmp_path).save(capture_run(hypha.store, run_id,
                                                    output_contract=ANSWER_CONTRACT))
        spec = RegressionSpec(id="all", fixtures=[run_id], required_checks=ALL_CHECKS)
        first = run_regression(spec, hypha.store, fixtures_dir=tmp_path)
        second = run_regression(spec, hypha.store, fixtures_dir=tmp_path,
                                record_events=False)
        kinds = [e.type for e in hypha.store.events(run_id)]
    assert first.passed and second.passed  # regression.* of the first never enter the trace
    assert kinds.count("regression.started") == kinds.count("regression.completed") == 1
