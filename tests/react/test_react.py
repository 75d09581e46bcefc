"""Harnessed ReAct (hypha scenario 19) on the real embedded runtime (SQLite, PostgreSQL):
the 11-state path, parking for a person (the model's request, the policy's review),
policy denials as observations, and both budgets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Hypha, RunFailed, RunHandle
from hypha_celery.backends import BackendError
from hypha_celery.react import (
    HAPPY_PATH,
    MockProvider,
    model_decides,
    parse_action,
    react_graph,
)
from hypha_celery.tools import PolicyRule, SideEffect, ToolPolicy, ToolRegistry, ToolSpec
from tests.runtime.support import WAIT, assert_well_formed, running, wait_until

CALLS: dict[str, int] = {}
LOOP = ["Reasoning", "ActionSelected", "PolicyChecked", "Acting", "ObservationRecorded",
        "Verifying", "MemorySync"]
FINISH = ["Reasoning", "ActionSelected", "Verifying", "MemorySync"]
START = ["Idle", "RunInitialized", "ContextBuilt"]


def handler(tool_id: str, output: Any) -> Any:
    def call(args: Any) -> Any:
        CALLS[tool_id] = CALLS.get(tool_id, 0) + 1
        return output
    return call


def tools() -> ToolRegistry:
    reg = ToolRegistry()
    levels: dict[str, SideEffect] = {"kb.search": "read", "ops.deploy": "write",
                                     "mail.send": "external_effect", "db.drop": "irreversible"}
    for tool_id, level in levels.items():
        reg.register(ToolSpec(id=tool_id, side_effect=level, input_schema={"type": "object"}),
                     handler(tool_id, {"answer": "ok"} if tool_id == "kb.search"
                             else {"done": tool_id}))
    return reg


def use(tool: str) -> dict[str, Any]:
    return {"action": "tool", "tool": tool, "input": {"q": "hypha"}}


def finish(output: Any) -> dict[str, Any]:
    return {"action": "finish", "output": output}


#: The policy of test 3: writes and external effects need a person's approval.
REVIEWED = ToolPolicy(id="reviewed", default_effect="allow", rules=[
    PolicyRule(id="review-effects", effect="require_review",
               side_effects=["write", "external_effect"])])


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    CALLS.clear()
    with running(store_url) as h:
        yield h


def kinds(run: RunHandle) -> list[str]:
    return [e.kind for e in run.events()]


def of_kind(run: RunHandle, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in run.events() if e.kind == kind]


def path(hypha: Hypha, run: RunHandle) -> list[str]:
    return list(hypha.store.get(run.id)["fsm"]["path"])


def start(hypha: Hypha, provider: MockProvider, **options: Any) -> RunHandle:
    hypha.register(react_graph(provider, tools(), **options))
    return hypha.start("react", {"question": "what is hypha?"})


def test_one_tool_call_walks_the_eleven_state_path(hypha: Hypha) -> None:
    provider = MockProvider([use("kb.search"), finish("unused")])
    run = start(hypha, provider)
    assert run.wait(WAIT) == {"answer": {"answer": "ok"}, "iterations": 1}
    assert path(hypha, run) == list(HAPPY_PATH)
    assert [d["state"] for d in of_kind(run, "fsm.state.entered")] == list(HAPPY_PATH)
    for kind in ("model.call.started", "model.call.completed", "tool.call.requested",
                 "tool.policy.checked", "tool.call.started", "tool.call.completed"):
        assert kind in kinds(run), kind
    assert len(of_kind(run, "tool.policy.checked")) == 1
    assert (CALLS, provider.remaining) == ({"kb.search": 1}, 1)
    (request,) = provider.requests
    assert request["question"] == "what is hypha?"
    assert [t["id"] for t in request["tools"]] == ["kb.search", "ops.deploy", "mail.send",
                                                   "db.drop"]
    assert hypha.store.get(run.id)["status"] == "completed"
    assert_well_formed(run)


def test_with_model_decides_the_tool_result_goes_back_to_the_model(hypha: Hypha) -> None:
    provider = MockProvider([use("kb.search"),
                             lambda request: finish(request["memory"][-1]["output"])])
    run = start(hypha, provider, verify=model_decides)
    assert run.wait(WAIT) == {"answer": {"answer": "ok"}, "iterations": 2}
    assert path(hypha, run) == [*START, *LOOP, *FINISH, "Completed"]
    assert provider.requests[1]["observation"]["status"] == "completed"
    assert len(of_kind(run, "model.call.completed")) == 2
    assert_well_formed(run)


def test_the_models_human_review_parks_the_run_until_approved(hypha: Hypha) -> None:
    provider = MockProvider([{"action": "human_review", "reason": "sure?"}, finish("yes")])
    run = start(hypha, provider)
    wait_until(lambda: run.status().status == "waiting_human")
    assert "human.review.requested" in kinds(run) and "run.waiting_human" in kinds(run)
    assert hypha.store.get(run.id)["fsm"]["state"] == "HumanReview"
    (pending,) = [r for r in hypha.reviews() if r.run_id == run.id]
    assert pending.subject["to"] == "ObservationRecorded"
    hypha.approve(run.id, by="alice")
    assert run.wait(WAIT) == {"answer": "yes", "iterations": 2}
    assert path(hypha, run) == [*START, "Reasoning", "ActionSelected", "HumanReview",
                                "ObservationRecorded", "Verifying", "MemorySync", *FINISH,
                                "Completed"]
    seen = provider.requests[1]["observation"]
    assert (seen["source"], seen["by"], seen["reason"]) == ("human", "alice", "sure?")
    assert_well_formed(run)


@pytest.mark.parametrize(("tool", "acting"), [("ops.deploy", "Acting"),
                                              ("mail.send", "ActingEffect")])
def test_a_tool_the_policy_reviews_runs_once_after_approval(hypha: Hypha, tool: str,
                                                            acting: str) -> None:
    run = start(hypha, MockProvider([use(tool)]), policy=REVIEWED)
    wait_until(lambda: run.status().status == "waiting_human")
    assert CALLS == {}  # parked before Acting: nothing ran
    assert path(hypha, run)[-2:] == ["PolicyChecked", "HumanReview"]
    review_id = hypha.approve(run.id, by="bob")
    assert run.wait(WAIT) == {"answer": {"done": tool}, "iterations": 1}
    assert CALLS[tool] == 1 and len(CALLS) == 1
    assert path(hypha, run) == [*START, "Reasoning", "ActionSelected", "PolicyChecked",
                                "HumanReview", acting, *LOOP[4:], "Completed"]
    (approved,) = of_kind(run, "tool.call.approved")
    assert (approved["review_id"], approved["approved_by"]) == (review_id, "bob")
    assert_well_formed(run)


@pytest.mark.parametrize(("tool", "code"), [("db.drop", "TOOL_POLICY_DENIED"),
                                           ("no.such", "TOOL_NOT_FOUND")])
def test_a_denied_tool_is_the_observation_and_the_run_goes_on(hypha: Hypha, tool: str,
                                                              code: str) -> None:
    provider = MockProvider([use(tool), finish("gave up")])
    run = start(hypha, provider)
    assert run.wait(WAIT) == {"answer": "gave up", "iterations": 2}
    assert CALLS == {}
    (rejected,) = of_kind(run, "tool.call.rejected")
    assert (rejected["code"], rejected["tool"]) == (code, tool)
    if tool == "db.drop":  # hypha scenario 18: the default policy denies irreversible
        assert (rejected["side_effect"], rejected["source"]) == ("irreversible", "local")
    assert path(hypha, run) == [*START, "Reasoning", "ActionSelected", "PolicyChecked",
                                "Verifying", "MemorySync", *FINISH, "Completed"]
    denial = provider.requests[1]["memory"][0]
    assert (denial["source"], denial["status"], denial["code"]) == ("policy", "denied", code)
    assert "tool.call.started" not in kinds(run)
    assert_well_formed(run)


def test_max_iterations_ends_the_loop_with_the_last_observation(hypha: Hypha) -> None:
    provider = MockProvider([use("kb.search")] * 3)
    run = start(hypha, provider, verify=model_decides, max_iterations=2)
    assert run.wait(WAIT) == {"answer": {"answer": "ok"}, "iterations": 2}
    assert hypha.store.get(run.id)["state"]["stop"] == "max_iterations"
    assert path(hypha, run) == [*START, *LOOP, *LOOP, "Completed"]
    assert (CALLS, provider.remaining) == ({"kb.search": 2}, 1)
    assert len(hypha.store.get(run.id)["state"]["memory"]) == 2
    assert_well_formed(run)


def test_max_steps_smaller_than_the_loop_fails_the_run(hypha: Hypha) -> None:
    run = start(hypha, MockProvider([use("kb.search")] * 4), verify=model_decides,
                max_steps=10)
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "max_steps_exceeded"
    assert CALLS == {"kb.search": 1}
    assert_well_formed(run)


def test_a_failing_model_ends_in_failed(hypha: Hypha) -> None:
    run = start(hypha, MockProvider([MockProvider.error("rate_limit")]))
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "node_failed"
    assert path(hypha, run) == [*START, "Reasoning", "Failed"]
    assert "model.call.failed" in kinds(run) and "run.failed" in kinds(run)
    assert_well_formed(run)


# -- no runtime ----------------------------------------------------------------------


def test_parse_action_reads_hyphas_forms() -> None:
    assert parse_action({"action": "tool", "toolId": "a.b"}) == {
        "action": "tool", "tool": "a.b", "input": {}}
    assert parse_action({"toolCalls": [{"name": "a.b", "arguments": {"x": 1}}]}) == {
        "action": "tool", "tool": "a.b", "input": {"x": 1}}
    assert parse_action({"action": "model", "output": 3}) == {"action": "finish", "output": 3}
    assert parse_action({"action": "human_review"}) == {"action": "human_review",
                                                        "reason": ""}
    assert parse_action("plain text") == {"action": "finish", "output": "plain text"}
    assert parse_action({"say": "hi"}) == {"action": "finish", "output": {"say": "hi"}}


def test_mock_provider_plays_its_script_in_order() -> None:
    provider = MockProvider([{"a": 1}, lambda request: {"echo": request},
                             MockProvider.error("overloaded")])
    assert provider({"n": 1}) == {"a": 1}
    assert provider({"n": 2}) == {"echo": {"n": 2}}
    with pytest.raises(BackendError) as info:
        provider({"n": 3})
    assert info.value.kind == "overloaded"
    with pytest.raises(BackendError) as info:
        provider({"n": 4})
    assert info.value.kind == "no_script"
    assert provider.requests == [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]
    provider.close()
