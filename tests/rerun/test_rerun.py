"""Recorded model / tool calls and re-execution against new code (real SQLite store,
embedded runtime; the CLI through the real ``hypha`` script)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import FanOut, Finish, Hypha, Next
from hypha_celery.events import Event
from hypha_celery.rerun import rerun
from tests.cli.helpers import assert_one_line_error, clean_env, hypha
from tests.rerun import app
from tests.runtime.support import WAIT, embedded


@pytest.fixture
def recorded(sqlite_url: str) -> Iterator[tuple[str, list[Event]]]:
    h: Hypha = embedded(sqlite_url)
    try:
        h.register(app.graph())
        run = h.start("research", "why?")
        assert run.wait(WAIT) == {"topic": f"topic:{len(app.PROMPT) + 4}", "docs": 4}
        yield sqlite_url, run.events()
    finally:
        h.close()


def kinds(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def test_calls_are_recorded_around_the_node_outcome_without_the_request(
        recorded: tuple[str, list[Event]]) -> None:
    _, events = recorded
    calls = [e for e in events if e.type.startswith(("model.call.", "tool.call."))]
    assert [e.type for e in calls] == ["model.call.started", "model.call.completed",
                                       *["tool.call.started", "tool.call.completed"] * 2]
    started, done = calls[0], calls[1]
    assert started.correlation_id == done.correlation_id == started.payload["call_id"]
    assert done.causation_id == started.id
    assert started.payload["model"] == "small-llm" and len(started.payload["request_hash"]) == 16
    assert done.payload["output"] == {"text": f"topic:{len(app.PROMPT) + 4}"}
    assert calls[2].payload["side_effect"] == "read" and calls[2].step_id == "2"
    # the call events sit between the node's start and its outcome
    seqs = {e.type: e.seq for e in events if e.execution_id == started.execution_id}
    assert seqs["node.execution.started"] < started.seq < done.seq < \
        seqs["node.execution.completed"]
    assert app.PROMPT not in json.dumps([e.model_dump() for e in events])


def test_the_same_code_replays_without_calling_anything(
        recorded: tuple[str, list[Event]], monkeypatch: pytest.MonkeyPatch) -> None:
    _, events = recorded
    app.CALLED.clear()
    report = rerun(app.graph(), events)
    assert report.ok, report.divergence
    assert (report.decisions, report.executions, report.skipped) == (3, 4, 0)
    assert app.CALLED == []  # every model and tool output came from the recording


def test_a_changed_decision_is_the_first_divergence(
        recorded: tuple[str, list[Event]]) -> None:
    _, events = recorded

    def policy(ctx: Any) -> Any:
        if ctx.step == 1:
            return FanOut([Next("lookup", s) for s in ("faq", "wiki", "docs")], reducer="merge")
        return app.policy(ctx)

    d = rerun(app.graph(policy=policy), events).divergence
    assert d is not None and (d.what, d.step) == ("decision", 1)
    assert d.expected["node_ids"] == ["lookup", "lookup"]
    assert d.actual["node_ids"] == ["lookup"] * 3


def test_a_new_node_a_changed_input_and_a_changed_result(
        recorded: tuple[str, list[Event]]) -> None:
    _, events = recorded
    new_node = rerun(app.graph(policy=lambda ctx: Next("other") if ctx.step == 0
                               else app.policy(ctx)), events).divergence
    assert new_node is not None and new_node.what == "decision"
    new_input = rerun(app.graph(policy=lambda ctx: Next("think", "how?") if ctx.step == 0
                                else app.policy(ctx)), events).divergence
    assert new_input is not None and (new_input.what, new_input.actual) == ("input", "how?")
    result = rerun(app.graph(policy=lambda ctx: Finish("other") if ctx.step == 2
                             else app.policy(ctx)), events).divergence
    assert result is not None and result.what == "result"


def test_a_changed_output_or_a_changed_call_diverges(
        recorded: tuple[str, list[Event]]) -> None:
    _, events = recorded
    output = rerun(app.changed_output, events).divergence
    assert output is not None and (output.what, output.step) == ("output", 1)
    assert output.actual == ["ok", {"topic": "changed"}]
    extra = rerun(app.more_calls, events).divergence
    assert extra is not None and extra.what == "call" and "new model call" in extra.message

    def other_prompt(state: Any, input: Any, ctx: Any) -> Any:
        return {"topic": ctx.model("small-llm", app.llm, {"prompt": "different"})["text"]}

    changed = rerun(app.graph(nodes={"think": other_prompt, "lookup": app.lookup}),
                    events).divergence
    assert changed is not None and changed.what == "call" and "request_hash" in changed.message

    def no_call(state: Any, input: Any, ctx: Any) -> Any:
        return {"topic": f"topic:{len(app.PROMPT) + 4}"}

    fewer = rerun(app.graph(nodes={"think": no_call, "lookup": app.lookup}), events).divergence
    assert fewer is not None and fewer.what == "call" and "fewer" in fewer.message


def test_cli_replay_against_new_code(recorded: tuple[str, list[Event]]) -> None:
    store, events = recorded
    env = clean_env(HYPHA_STORE_URL=store)
    run_id = events[0].run_id
    ok = hypha("replay", run_id, "--against", "tests.rerun.app:same", env=env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(f"run {run_id}: no divergence (3 decisions, 4 executions")
    bad = hypha("replay", run_id, "--against", "tests.rerun.app:changed_output", "--json",
                env=env)
    assert bad.returncode == 1, bad.stderr
    report = json.loads(bad.stdout)
    assert report["ok"] is False and report["divergence"]["what"] == "output"
    line = assert_one_line_error(hypha("replay", run_id, "--against", "tests.rerun.app:nope",
                                       env=env))
    assert "--against tests.rerun.app:nope" in line
    missing = assert_one_line_error(hypha("replay", "no-such-run", "--against",
                                          "tests.rerun.app:same", env=env))
    assert "no events for run" in missing


def test_a_retried_attempt_is_replayed_from_the_final_attempts_calls(sqlite_url: str) -> None:
    from hypha_celery import Graph, Node, NodeContext, RetryPolicy

    def node(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        out = ctx.model("m", lambda req: {"n": req["attempt"]}, {"attempt": ctx.attempt})
        if ctx.attempt == 1:
            raise ConnectionError("after the call")
        return {"n": out["n"]}

    def policy(ctx: Any) -> Any:
        return Next("a", None) if ctx.step == 0 else Finish(ctx.state)

    def build() -> Graph:
        retry = RetryPolicy(max_attempts=2, backoff=0.01, max_backoff=0.01)
        return Graph("retried", {"a": Node(node, retry=retry)}, policy)

    h: Hypha = embedded(sqlite_url)
    try:
        h.register(build())
        run = h.start("retried")
        assert run.wait(WAIT) == {"n": 2}
        events = run.events()
    finally:
        h.close()
    assert len([e for e in events if e.type == "model.call.completed"]) == 2
    # replayed as attempt 1, the node is served the call its final (2nd) attempt made
    report = rerun(build(), events)
    assert report.ok, report.divergence
