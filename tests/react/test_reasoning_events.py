"""ReAct's reasoning events (issue 26 point 4) on the real embedded runtime (SQLite,
PostgreSQL): per iteration deliberation, thinking (counts only), inference, decision,
action and step, in a fixed order; typed payloads; re-execution unaffected."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Hypha, RunHandle
from hypha_celery.events import payloads as ev
from hypha_celery.react import MockProvider, react_graph
from hypha_celery.react._events import MAX_RATIONALE_CHARS
from hypha_celery.rerun import rerun
from hypha_celery.tools import PolicyRule, ToolPolicy, ToolRegistry, ToolSpec
from tests.runtime.support import WAIT, assert_well_formed, running

REASONING = ("agent.deliberation.started", "context.build.started",
             "context.build.completed", "model.call.started", "model.call.completed",
             "thinking.started", "thinking.completed", "inference.completed",
             "agent.deliberation.completed", "reasoning.decision.recorded",
             "agent.action.selected", "react.step.completed")
THOUGHT = "a private chain of thought that must go nowhere"


def tools() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(ToolSpec(id="kb.search", side_effect="read", input_schema={"type": "object"}),
                 lambda args: {"answer": "ok"})
    reg.register(ToolSpec(id="ops.deploy", side_effect="write",
                          input_schema={"type": "object"}), lambda args: {"done": True})
    return reg


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    with running(store_url) as h:
        yield h


def start(hypha: Hypha, provider: MockProvider, **options: Any) -> RunHandle:
    hypha.register(react_graph(provider, tools(), **options))
    return hypha.start("react", {"question": "what is hypha?"})


def trace(run: RunHandle) -> list[str]:
    return [e.kind for e in run.events() if e.kind in REASONING]


def bodies(run: RunHandle, kind: str) -> list[Any]:
    return [e.body for e in run.events() if e.kind == kind]


def test_a_tool_then_a_finish_writes_each_steps_events_in_order(hypha: Hypha) -> None:
    provider = MockProvider([
        MockProvider.thinking({"action": "tool", "tool": "kb.search", "input": {"q": "x"},
                               "rationale": "look it up"}, THOUGHT),
        {"action": "finish", "output": "done"}])
    run = start(hypha, provider, verify=lambda o: o.get("source") == "model")
    assert run.wait(WAIT) == {"answer": "done", "iterations": 2}
    step1 = ["context.build.started", "context.build.completed",
             "agent.deliberation.started", "model.call.started", "model.call.completed",
             "thinking.started", "thinking.completed", "inference.completed",
             "agent.deliberation.completed", "reasoning.decision.recorded",
             "agent.action.selected", "react.step.completed"]
    step2 = [k for k in step1 if not k.startswith("thinking.")]
    assert trace(run) == [*step1, *step2]
    first = bodies(run, "agent.deliberation.started")[0]
    assert isinstance(first, ev.AgentDeliberationStarted)
    assert (first.step, first.node, first.options) == (1, "reason", 3)
    assert first.execution_id is not None  # a node's fact names its execution
    (thought,) = bodies(run, "thinking.completed")
    assert (thought.step, thought.node, thought.mode, thought.chars, thought.summary) == \
        (1, "reason", "summary", len(THOUGHT), None)
    decisions = bodies(run, "reasoning.decision.recorded")
    assert [(d.step, d.decision, d.reason) for d in decisions] == \
        [(1, "tool:kb.search", "look it up"), (2, "finish", None)]
    assert [(a.step, a.action, a.tool) for a in bodies(run, "agent.action.selected")] == \
        [(1, "tool", "kb.search"), (2, "finish", None)]
    assert [(d.chosen, d.options) for d in bodies(run, "agent.deliberation.completed")] == \
        [("tool", 3), ("finish", 3)]
    steps = bodies(run, "react.step.completed")
    assert [(s.step, s.phase, s.action) for s in steps] == \
        [(1, "reason", "tool"), (2, "complete", "finish")]
    inference = bodies(run, "inference.completed")
    assert [(i.step, i.model) for i in inference] == [(1, "mock"), (2, "mock")]
    built = [b.context_hash for b in bodies(run, "context.build.completed")]
    assert [i.context_hash for i in inference] == built  # the context each call saw
    assert all(h.startswith("sha256:") for h in built) and built[0] != built[1]
    assert all(i.latency_ms is not None and i.latency_ms >= 0 for i in inference)
    assert THOUGHT not in json.dumps([e.data for e in run.events()])
    assert_well_formed(run)


def test_a_policy_denial_and_a_budget_stop_end_their_steps(hypha: Hypha) -> None:
    deny = ToolPolicy(id="deny", default_effect="allow", rules=[
        PolicyRule(id="no-writes", effect="deny", side_effects=["write"])])
    provider = MockProvider([{"action": "tool", "tool": "ops.deploy", "input": {}}])
    run = start(hypha, provider, policy=deny, max_iterations=1)
    run.wait(WAIT)
    assert [(s.step, s.phase, s.action) for s in bodies(run, "react.step.completed")] == \
        [(1, "complete", "tool")]
    assert "thinking.started" not in trace(run)


def test_a_long_rationale_is_cut_and_a_non_string_one_is_ignored(hypha: Hypha) -> None:
    provider = MockProvider([
        {"action": "tool", "tool": "kb.search", "input": {}, "rationale": "r" * 1000},
        {"action": "finish", "output": 1, "rationale": {"not": "text"}}])
    run = start(hypha, provider, verify=lambda o: o.get("source") == "model")
    run.wait(WAIT)
    reasons = [d.reason for d in bodies(run, "reasoning.decision.recorded")]
    assert reasons == ["r" * MAX_RATIONALE_CHARS, None]


def test_re_execution_ignores_the_reasoning_facts(hypha: Hypha) -> None:
    def script() -> MockProvider:
        return MockProvider([MockProvider.thinking(
            {"action": "tool", "tool": "kb.search", "input": {}}, THOUGHT)])
    run = start(hypha, script())
    run.wait(WAIT)
    events = run.events()
    assert "thinking.completed" in [e.kind for e in events]
    report = rerun(react_graph(script(), tools()), events)
    assert report.ok, report.divergence
