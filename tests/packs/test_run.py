"""The example pack compiled and run on the embedded runtime (SQLite and PostgreSQL): its
evaluation cases meet their contracts, the refund path parks for a review and runs its
tool exactly once when approved, an irreversible tool is denied under the default policy,
and a pack policy governs transitions."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from examples.packs.support_triage import nodes
from hypha_celery import Hypha, RunFailed
from hypha_celery.errors import NoPendingReview
from hypha_celery.packs import (
    DomainPack,
    compile_pack,
    load_pack,
    output_issues,
    overlay,
    validate_input,
)
from tests.packs import EXAMPLE
from tests.runtime.support import WAIT, assert_well_formed, of_kind, running, wait_until

WORKFLOW = "support-triage"


@pytest.fixture(scope="module")
def pack() -> DomainPack:
    return load_pack(EXAMPLE)


@pytest.fixture
def hypha(store_url: str, pack: DomainPack) -> Iterator[Hypha]:
    with running(store_url) as h:
        h.register(compile_pack(pack))
        yield h


def start(hypha: Hypha, pack: DomainPack, ticket: dict[str, Any]) -> Any:
    validate_input(pack, WORKFLOW, ticket)  # as the CLI does, before a run starts
    return hypha.start(WORKFLOW, ticket)


def fresh_order() -> str:
    return f"A-{uuid.uuid4().int % 10**9}"


def refunds_of(order: str) -> list[dict[str, str]]:
    return [r for r in nodes.LEDGER if r["order"] == order]


def test_every_evaluation_case_runs_and_meets_its_contract(hypha: Hypha,
                                                           pack: DomainPack) -> None:
    expected = {"password-question": ("answer", ["Intake", "Route", "Search", "Answer", "Done"]),
                "complaint": ("escalation", ["Intake", "Route", "Escalate", "Done"]),
                "close-account": ("escalation", ["Intake", "Route", "CloseAccount",
                                                 "Escalate", "Done"])}
    for case in pack.evaluation_cases:
        run = start(hypha, pack, case.input)
        result = run.wait(WAIT)
        assert output_issues(pack, case.workflow, result) == [], (case.id, result)
        kind, path = expected[case.id]
        assert result["kind"] == kind, case.id
        assert hypha.store.get(run.id)["fsm"]["path"] == path, case.id
        assert_well_formed(run)


def test_the_answer_path_records_its_read_tool(hypha: Hypha, pack: DomainPack) -> None:
    run = start(hypha, pack, {"text": "how do I reset my password?"})
    assert run.wait(WAIT)["sources"] == ["kb-12", "kb-31"]
    (checked,) = [e.data for e in of_kind(run, "tool.policy.checked")]
    assert (checked["tool"], checked["decision"]["allowed"]) == ("kb.search", True)
    assert [e.data["tool"] for e in of_kind(run, "tool.call.completed")] == ["kb.search"]


def test_a_refund_parks_for_review_and_approval_runs_the_tool_once(
        hypha: Hypha, pack: DomainPack) -> None:
    order = fresh_order()
    run = start(hypha, pack, {"text": "I want a refund", "order": order})
    wait_until(lambda: run.status().status == "waiting_human", what="the review")
    (pending,) = [r for r in hypha.reviews() if r.run_id == run.id]
    assert pending.reason == "a refund moves money: a person approves it"
    assert pending.subject == {"workflow": WORKFLOW, "from": "Route", "to": "Refund"}
    assert refunds_of(order) == []  # nothing ran before the approval
    assert hypha.approve(run.id, by="alice") == pending.review_id
    with pytest.raises(NoPendingReview):
        hypha.approve(run.id, by="bob")  # a second approval: refused, runs nothing
    result = run.wait(WAIT)
    with pytest.raises(NoPendingReview):
        hypha.approve(run.id, by="bob")
    (booked,) = refunds_of(order)
    assert result == {"kind": "refund", "refund_id": booked["refund_id"],
                      "message": f"Refund {booked['refund_id']} for order {order} is on its "
                                 "way (3-5 business days)."}
    assert [e.data["tool"] for e in of_kind(run, "tool.call.started")] == ["billing.refund"]
    (approved,) = [e.data for e in of_kind(run, "tool.call.approved")]
    assert approved["review_id"] == pending.review_id
    assert [e.data["by"] for e in of_kind(run, "human.review.approved")] == ["alice"]
    assert hypha.store.get(run.id)["fsm"]["path"] == [
        "Intake", "Route", "HumanReview", "Refund", "Refunded", "Done"]
    assert_well_formed(run)


def test_a_rejected_refund_never_calls_the_tool(hypha: Hypha, pack: DomainPack) -> None:
    order = fresh_order()
    run = start(hypha, pack, {"text": "refund my money back", "order": order})
    wait_until(lambda: run.status().status == "waiting_human", what="the review")
    hypha.reject(run.id, by="bob", reason="outside the refund window")
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "review_rejected"
    assert refunds_of(order) == []
    assert of_kind(run, "tool.call.requested") == []


def test_an_irreversible_tool_is_denied_under_the_default_policy(
        hypha: Hypha, pack: DomainPack) -> None:
    run = start(hypha, pack, {"text": "Please delete my account"})
    result = run.wait(WAIT)
    assert (result["kind"], result["reason"]) == ("escalation", "TOOL_POLICY_DENIED")
    (rejected,) = [e.data for e in of_kind(run, "tool.call.rejected")]
    assert (rejected["tool"], rejected["code"], rejected["side_effect"]) == (
        "accounts.close", "TOOL_POLICY_DENIED", "irreversible")
    assert rejected["message"] == ("Side effect level irreversible requires an explicit "
                                   "policy override.")
    assert of_kind(run, "tool.call.started") == []
    assert hypha.store.get(run.id)["state"]["closure"]["status"] == "denied"


def _with_policy(pack: DomainPack, policy: dict[str, Any]) -> DomainPack:
    """The pack with its workflow governed by ``policy`` (an overlay: upsert by id)."""
    workflow = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
                             ["workflows"][0])
    workflow["policy"] = policy["id"]
    return overlay(pack, {"version": "1.0.1-test", "policies": [policy],
                          "workflows": [workflow]})


def test_a_pack_policy_overrides_the_default_for_a_tool(store_url: str,
                                                        pack: DomainPack) -> None:
    lenient = _with_policy(pack, {"id": "back-office", "default_effect": "allow",
                                  "allow": ["accounts.close"]})
    with running(store_url) as hypha:
        hypha.register(compile_pack(lenient))
        run = start(hypha, lenient, {"text": "close my account"})
        assert run.wait(WAIT) == {"kind": "answer", "message": "Your account is closed."}
        assert [e.data["tool"] for e in of_kind(run, "tool.call.completed")] == [
            "accounts.close"]
        assert hypha.store.get(run.id)["fsm"]["path"][-3:] == ["CloseAccount", "Closed",
                                                               "Done"]


def test_a_pack_policy_denies_a_transition(store_url: str, pack: DomainPack) -> None:
    strict = _with_policy(pack, {"id": "no-closing", "default_effect": "allow", "rules": [
        {"id": "route", "effect": "deny",
         "scopes": [f"fsm:{WORKFLOW}:Route->CloseAccount"],
         "reason": "accounts are closed by the back office"}]})
    with running(store_url) as hypha:
        hypha.register(compile_pack(strict))
        run = start(hypha, strict, {"text": "close my account"})
        with pytest.raises(RunFailed) as info:
            run.wait(WAIT)
        assert info.value.reason == "transition_rejected"
        (rejected,) = [e.data for e in of_kind(run, "fsm.transition.rejected")]
        assert (rejected["to"], rejected["reason"]) == ("CloseAccount", "policy_denied")
        assert "accounts are closed by the back office" in rejected["message"]
        done = start(hypha, strict, {"text": "how do I reset my password?"})
        assert done.wait(WAIT)["kind"] == "answer"  # other transitions still allowed
