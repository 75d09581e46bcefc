"""The deterministic evaluator: contracts, trace specs, evaluation specs; evaluate_run
records eval.started then eval.completed (or eval.failed)."""

from __future__ import annotations

import pytest

from hypha_celery.errors import InvalidContract, RunNotFound
from hypha_celery.evaluation import (
    EvaluationSpec,
    OutputContract,
    TraceSpec,
    evaluate,
    evaluate_run,
)
from hypha_celery.evaluation import _evaluator as evaluator_module
from tests.replay.support import (
    ANSWER_CONTRACT,
    agent_graph,
    app,
    completed_run_events,
    finished,
    linear_graph,
)

CONTRACT = OutputContract("output.default", ANSWER_CONTRACT)


def test_unsupported_and_under_specified_specs_fail_explicitly() -> None:
    """hypha §4 scenario 17 (first part)."""
    summary = evaluate(completed_run_events(), run_id="run_eval_specs", specs=[
        EvaluationSpec(id="eval.schema.missing-rubric", type="schema"),
        EvaluationSpec(id="eval.human", type="human"),
        EvaluationSpec(id="eval.cost", type="cost"),
        EvaluationSpec(id="eval.contracts", type="output_contract"),
    ])
    assert not summary.passed and summary.status == "failed" and summary.score == 0.0
    assert [(r.id, r.status) for r in summary.results] == [
        ("eval.schema.missing-rubric", "failed"), ("eval.human", "failed"),
        ("eval.cost", "failed"), ("eval.contracts", "failed")]
    messages = [r.checks[0].message for r in summary.results]
    assert "needs a rubric" in messages[0] and "not deterministic" in messages[1]
    assert "needs output contracts" in messages[3]
    assert summary.results[0].checks[0].id == "eval.schema.missing-rubric:unsupported"


def test_specs_that_run() -> None:
    summary = evaluate(completed_run_events(), run_id="run_replay", contracts=[CONTRACT],
                       traces=[TraceSpec(id="trace.replay", event_types=[
                           "run.started", "node.execution.scheduled", "tool.policy.checked",
                           "run.completed"])],
                       specs=[EvaluationSpec(id="eval.schema", type="schema",
                                             rubric={"required": ["answer"]}),
                              EvaluationSpec(id="eval.contracts", type="output_contract"),
                              EvaluationSpec(id="eval.tools", type="tool_trace")])
    assert summary.passed, summary.brief()
    assert [r.id for r in summary.results] == [
        "output.default:output-contract", "trace.replay", "eval.schema",
        "eval.contracts:output.default", "eval.tools"]
    assert summary.id == "run_replay:deterministic-evaluation" and summary.score == 1.0


def test_output_defaults_to_the_final_output_and_can_be_given() -> None:
    assert evaluate(completed_run_events(), contracts=[ANSWER_CONTRACT]).passed
    given = evaluate(completed_run_events(), contracts=[ANSWER_CONTRACT], output={"x": 1})
    assert not given.passed
    assert given.results[0].checks[0].id == "output:schema:1"
    assert evaluate([]).passed and evaluate([]).score == 1.0  # nothing asked, nothing failed


def test_scores_average_results() -> None:
    summary = evaluate(completed_run_events(), contracts=[ANSWER_CONTRACT, {"type": "string"}])
    assert [r.id for r in summary.results] == ["output:output-contract",
                                               "output.2:output-contract"]
    assert summary.score == 0.5 and not summary.passed


def test_evaluate_run_records_started_then_completed(store_url: str) -> None:
    """hypha §4 scenario 17: evaluateAndRecord writes one eval.started and one
    eval.completed with summary.status passed."""
    with app(store_url, agent_graph) as hypha:
        run_id = finished(hypha, "agent")
        before = hypha.store.load(run_id)
        summary = evaluate_run(hypha.store, run_id, contracts=[CONTRACT],
                               traces=[TraceSpec(event_types=["model.call.completed"])])
        again = evaluate_run(hypha.store, run_id, traces=[TraceSpec()])
        events = hypha.store.events(run_id)
        after = hypha.store.load(run_id)
    assert summary.passed and again.passed  # its own eval.* events never enter the trace
    kinds = [e.type for e in events]
    assert kinds[-4:] == ["eval.started", "eval.completed", "eval.started", "eval.completed"]
    started, completed = events[-4], events[-3]
    assert started.payload == {"contracts": ["output.default"], "traces": ["trace.completeness"],
                               "specs": []}
    brief = completed.payload["summary"]
    assert brief["status"] == "passed" and brief["score"] == 1.0
    assert [r["id"] for r in brief["results"]] == ["output.default:output-contract",
                                                   "trace.completeness"]
    assert "found" not in str(completed.payload)  # verdicts and ids, never the output
    assert before is not None and after is not None
    assert after["status"] == before["status"] and after["result"] == before["result"]


def test_a_failing_evaluation_is_still_completed(store_url: str) -> None:
    with app(store_url, linear_graph(fail=True)) as hypha:
        run_id = finished(hypha, "linear")
        summary = evaluate_run(hypha.store, run_id, contracts=[ANSWER_CONTRACT])
        last = hypha.store.events(run_id)[-1]
    assert not summary.passed  # the output is {"error": "node_failed"}
    assert last.type == "eval.completed" and last.payload["summary"]["status"] == "failed"
    assert last.payload["summary"]["results"][0]["failed_checks"] == ["output:schema:1",
                                                                      "output:schema:2"]


def test_an_evaluation_that_raises_records_eval_failed(sqlite_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("evaluator bug")

    with app(sqlite_url, linear_graph()) as hypha:
        run_id = finished(hypha, "linear")
        monkeypatch.setattr(evaluator_module, "evaluate", broken)
        with pytest.raises(RuntimeError, match="evaluator bug"):
            evaluate_run(hypha.store, run_id)
        tail = hypha.store.events(run_id)[-2:]
    assert [e.type for e in tail] == ["eval.started", "eval.failed"]
    assert tail[1].payload == {"error": "RuntimeError: evaluator bug"}


def test_bad_input_records_nothing(sqlite_url: str) -> None:
    with app(sqlite_url, linear_graph()) as hypha:
        run_id = finished(hypha, "linear")
        count = len(hypha.store.events(run_id))
        with pytest.raises(InvalidContract):
            evaluate_run(hypha.store, run_id, contracts=[{"type": 7}])
        with pytest.raises(RunNotFound):
            evaluate_run(hypha.store, "no-such-run")
        assert len(hypha.store.events(run_id)) == count
