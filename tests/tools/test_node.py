"""A governed tool as a workflow node, on the real embedded runtime (SQLite, PostgreSQL):
its steps recorded with the node's outcome, review gated by the workflow, exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Hypha
from hypha_celery.fsm import Fsm, WorkflowSpec, workflow_graph
from hypha_celery.runtime import canvas
from hypha_celery.tools import ToolRegistry, ToolSpec, tool_node
from tests.runtime.support import WAIT, assert_well_formed, running, wait_until

CALLS: list[Any] = []


def refund(args: dict[str, Any]) -> dict[str, Any]:
    CALLS.append(args)
    return {"refunded": args["order"]}


def tools() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(ToolSpec(id="billing.refund", side_effect="write", human_review=True,
                          input_schema={"type": "object", "required": ["order"],
                                        "properties": {"order": {"type": "string"}}},
                          output_schema={"type": "object"}), refund)
    reg.register(ToolSpec(id="billing.wipe", side_effect="irreversible",
                          input_schema={"type": "object"}), refund)
    return reg


def workflow(tool: str, review: bool) -> Any:
    spec = WorkflowSpec.model_validate({
        "id": "refunds", "initial_state": "Start", "terminal_states": ["Done"],
        "output": "variables.tool_result",
        "states": [{"id": "Start"}, {"id": "Done"},
                   {"id": "Refund", "node": "refund",
                    **({"human_review": {"required": True, "reason": "money"}} if review
                       else {})}],
        "transitions": [{"from": "Start", "to": "Refund"}, {"from": "Refund", "to": "Done"}]})
    nodes = {"refund": tool_node(tools(), tool)}
    return workflow_graph(Fsm(spec, nodes), nodes)


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    CALLS.clear()
    with running(store_url) as h:
        yield h


def test_a_reviewed_tool_runs_once_after_approval(hypha: Hypha) -> None:
    hypha.register(workflow("billing.refund", review=True))
    run = hypha.start("refunds", {"order": "A-1"})
    wait_until(lambda: run.status().status == "waiting_human")
    assert CALLS == []  # nothing ran before the approval
    review_id = hypha.approve(run.id, by="alice")
    result = run.wait(WAIT)
    assert result["status"] == "completed" and result["output"] == {"refunded": "A-1"}
    canvas.kickoff(hypha.celery, run.id, review_id)  # a duplicate resume message: fenced
    wait_until(lambda: hypha.store.get(run.id)["status"] == "completed")
    assert CALLS == [{"order": "A-1"}]
    kinds = [e.kind for e in run.events()]
    for kind in ("tool.call.requested", "tool.policy.checked", "tool.call.approved",
                 "tool.call.started", "tool.call.completed", "tool.output.validated"):
        assert kind in kinds, kind
    approved = next(e for e in run.events() if e.kind == "tool.call.approved")
    assert (approved.data["review_id"], approved.data["approved_by"]) == (review_id, "alice")
    assert "A-1" not in str([e.data for e in run.events() if e.kind.startswith("tool.")
                             and e.kind != "tool.call.completed"])
    assert_well_formed(run)


def test_without_the_workflows_review_the_tool_waits_and_runs_nothing(hypha: Hypha) -> None:
    hypha.register(workflow("billing.refund", review=False))
    result = hypha.start("refunds", {"order": "B-2"}).wait(WAIT)
    assert (result["status"], result["code"]) == ("human_review_required",
                                                  "TOOL_APPROVAL_REQUIRED")
    assert CALLS == []


def test_an_irreversible_tool_is_denied_by_the_default_policy(hypha: Hypha) -> None:
    hypha.register(workflow("billing.wipe", review=False))
    run = hypha.start("refunds", {"order": "C-3"})
    result = run.wait(WAIT)
    assert (result["status"], result["code"]) == ("denied", "TOOL_POLICY_DENIED")
    (rejected,) = [e.data for e in run.events() if e.kind == "tool.call.rejected"]
    assert (rejected["source"], rejected["side_effect"]) == ("local", "irreversible")
    assert CALLS == []
    assert_well_formed(run)


def test_the_governed_steps_and_the_call_are_logged_in_the_order_they_happened(
        hypha: Hypha) -> None:
    hypha.register(workflow("billing.refund", review=True))
    run = hypha.start("refunds", {"order": "E-5"})
    wait_until(lambda: run.status().status == "waiting_human")
    hypha.approve(run.id, by="alice")
    run.wait(WAIT)
    kinds = [e.kind for e in run.events() if e.kind.startswith("tool.")]
    assert kinds == ["tool.call.requested", "tool.policy.checked", "tool.call.approved",
                     "tool.call.started", "tool.call.completed", "tool.output.validated"]
