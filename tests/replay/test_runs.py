"""Replay of runs made by the embedded runtime, on SQLite and PostgreSQL stores."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.signals import before_task_publish

from hypha_celery import Finish, Graph, Next
from hypha_celery.errors import RunNotFound
from hypha_celery.evaluation import (
    RegressionSpec,
    TraceSpec,
    evaluate_run,
    evaluate_trace,
    run_regression,
)
from hypha_celery.replay import FileFixtureStore, ReplaySpec, capture, capture_run, compare
from tests.replay.support import (
    ANSWER_CONTRACT,
    BEHAVIOUR,
    agent_graph,
    app,
    finished,
    linear_graph,
    reset_behaviour,
    support_graph,
)


@pytest.fixture(autouse=True)
def _behaviour() -> Iterator[None]:
    reset_behaviour()
    yield
    reset_behaviour()


def test_capture_a_fan_out_run(store_url: str, tmp_path: Path) -> None:
    with app(store_url, support_graph()) as hypha:
        run_id = finished(hypha, "support", {"question": "why?"})
        before = hypha.store.load(run_id)
        fixtures = FileFixtureStore(tmp_path)
        fixture = capture_run(hypha.store, run_id, save=fixtures.save)
        events = hypha.store.events(run_id)
        after = hypha.store.load(run_id)

    assert fixture.state_path == ["classify", "lookup", "lookup", "lookup", "answer"]
    assert fixture.final_output == "billing: 14 hits"
    assert fixture.policy_decisions == ['0|next|["classify"]',
                                        '1|fanout|["lookup","lookup","lookup"]',
                                        '2|next|["answer"]', "3|finish|[]"]
    assert fixture.tool_calls == fixture.model_calls == fixture.memory_read_set == []
    assert fixtures.load(run_id) == fixture

    # replay.* went into the log, passively: the projection is the same, seq moved on
    kinds = [e.type for e in events]
    assert kinds[-2:] == ["replay.started", "replay.completed"]
    assert kinds.count("replay.completed") == 1
    done = events[-1].payload
    assert done["fixture_id"] == run_id and done["events"] == len(fixture.events)
    assert done["state_path"] == fixture.state_path
    assert before is not None and after is not None
    assert {k: v for k, v in after.items() if k not in ("seq", "updated_at")} == {
        k: v for k, v in before.items() if k not in ("seq", "updated_at")}
    assert after["seq"] == before["seq"] + 2

    # the fixture passes against its own run, replay events and all
    assert compare(fixture, events, check_run_id=True).passed


def test_model_and_tool_calls_are_captured(store_url: str) -> None:
    with app(store_url, agent_graph) as hypha:
        run_id = finished(hypha, "agent", {"q": "refund"})
        fixture = capture_run(hypha.store, run_id, output_contract=ANSWER_CONTRACT)
    assert fixture.final_output == {"answer": "found", "citations": ["faq-doc", "wiki-doc"]}
    assert fixture.model_calls == ["model.call.started|1|mock-1",
                                   "model.call.completed|1|mock-1"]
    assert sorted(fixture.tool_calls) == [
        'tool.call.completed|2|search|recorded|{"hits":["faq-doc"]}',
        'tool.call.completed|2|search|recorded|{"hits":["wiki-doc"]}']
    assert fixture.memory_read_set == ["2|working", "2|working"]
    assert fixture.policy_decisions.count('2|search|{"allowed":true}') == 2
    assert fixture.state_path == ["plan", "search", "search"]
    assert fixture.output_contract == ANSWER_CONTRACT

    lean = capture(fixture.events, ReplaySpec(capture_model_io=False, capture_tool_io=False))
    assert lean.model_calls == lean.tool_calls == []
    assert not any(t.startswith(("model.call.", "tool.call.")) for t in lean.event_types)


def test_calls_made_through_the_node_context_are_captured(store_url: str) -> None:
    """``ctx.model`` / ``ctx.tool`` record ``model.call.*`` / ``tool.call.*``; a capture
    signs them and a completeness check pairs them by call id."""

    def unreachable(_: Any) -> Any:
        raise ConnectionError("smtp down")

    def ask(state: dict[str, Any], question: Any, ctx: Any) -> dict[str, Any]:
        reply = ctx.model("mock-1", lambda req: {"text": f"re: {req['q']}"}, {"q": question})
        with pytest.raises(ConnectionError):
            ctx.tool("mail", unreachable, {"to": "ops"}, side_effect="external_effect")
        return {"reply": reply["text"]}

    def policy(ctx: Any) -> Any:
        return Next("ask", ctx.input) if ctx.step == 0 else Finish(ctx.state["reply"])

    with app(store_url, Graph("calls", {"ask": ask}, policy)) as hypha:
        run_id = finished(hypha, "calls", "refund?")
        fixture = capture_run(hypha.store, run_id)
        trace = evaluate_trace(fixture.events, run_id=run_id,
                               required=["model.call.completed", "tool.call.failed"])
    assert fixture.final_output == "re: refund?"
    assert fixture.model_calls == ["model.call.started|1|mock-1", "model.call.completed|1|mock-1"]
    (tool,) = fixture.tool_calls
    assert tool.startswith("tool.call.failed|1|mail|recorded|{") and "ConnectionError" in tool
    assert trace.passed, trace.failed_checks()


def test_a_fresh_run_of_the_same_code_matches(store_url: str) -> None:
    with app(store_url, linear_graph()) as hypha:
        first = capture_run(hypha.store, finished(hypha, "linear", {"q": 1}))
        second = finished(hypha, "linear", {"q": 1})
        diff = compare(first, hypha.store.events(second))
    assert diff.passed, diff.failed()
    assert diff.actual_run_id == second != first.run_id


def test_changed_code_shows_in_the_diff(store_url: str) -> None:
    with app(store_url, linear_graph()) as hypha:
        fixture = capture_run(hypha.store, finished(hypha, "linear"))
    with app(store_url, linear_graph(answer="changed")) as hypha:
        diff = compare(fixture, hypha.store.events(finished(hypha, "linear")))
    assert diff.failed() == ["output"]
    assert diff.output.expected == {"answer": "ok"} and diff.output.actual == {
        "answer": "changed"}


def test_a_failed_run_is_captured_with_its_reason(store_url: str) -> None:
    with app(store_url, linear_graph(fail=True)) as hypha:
        run_id = finished(hypha, "linear")
        fixture = capture_run(hypha.store, run_id)
    assert fixture.final_output == {"error": "node_failed"}
    assert fixture.event_types[-1] == "run.failed"
    assert fixture.state_path == ["classify", "respond"]


def test_capture_of_an_unknown_run_records_nothing(store_url: str) -> None:
    with app(store_url) as hypha, pytest.raises(RunNotFound):
        capture_run(hypha.store, "no-such-run")


def test_a_failing_save_records_replay_failed(store_url: str) -> None:
    def save(_: Any) -> None:
        raise OSError("disk full")

    with app(store_url, linear_graph()) as hypha:
        run_id = finished(hypha, "linear")
        with pytest.raises(OSError, match="disk full"):
            capture_run(hypha.store, run_id, save=save)
        tail = hypha.store.events(run_id)[-2:]
    assert [e.type for e in tail] == ["replay.started", "replay.failed"]
    assert tail[1].payload == {"fixture_id": run_id, "error": "OSError: disk full"}


def _raise(*_: Any, **__: Any) -> Any:
    raise AssertionError("replay called a node, a model or a tool")


def test_replay_and_evaluation_never_call_nodes_models_tools_or_services(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hypha's invariant: replay and evaluation are pure over the recorded events."""
    with app(sqlite_url, agent_graph) as hypha:
        run_id = finished(hypha, "agent", {"q": "refund"})
        fixtures = FileFixtureStore(tmp_path)
        fixture = capture_run(hypha.store, run_id, output_contract=ANSWER_CONTRACT,
                              save=fixtures.save)

        # the graph's code is replaced by code that raises; the network is gone
        for name in list(BEHAVIOUR):
            BEHAVIOUR[name] = _raise
        monkeypatch.setattr(socket.socket, "connect", _raise)
        monkeypatch.setattr(socket, "create_connection", _raise)
        published: list[str] = []

        def on_publish(sender: Any = None, **_: Any) -> None:
            published.append(str(sender))

        before_task_publish.connect(on_publish, weak=False)
        try:
            assert compare(fixture, hypha.store.events(run_id), check_run_id=True).passed
            summary = evaluate_run(hypha.store, run_id, contracts=[ANSWER_CONTRACT],
                                   traces=[TraceSpec(event_types=["model.call.completed"])])
            assert summary.passed, summary.brief()
            spec = RegressionSpec(id="pure", fixtures=[run_id],
                                  required_checks=["event_types", "state_path", "tool_calls",
                                                   "model_calls", "output_contract",
                                                   "trace_completeness"])
            assert run_regression(spec, hypha.store, fixtures_dir=tmp_path).passed
        finally:
            before_task_publish.disconnect(on_publish)
    assert published == []
