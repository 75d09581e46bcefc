"""WorkflowSpec validation and the compiled FSM's transition checks (pure: no services)."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery.errors import TransitionRejected, WorkflowSpecError
from hypha_celery.fsm import RECOVERY_STATES, Fsm, WorkflowSpec


def spec(**changes: Any) -> WorkflowSpec:
    doc: dict[str, Any] = {
        "id": "wf", "initial_state": "Idle", "terminal_states": ["Completed"],
        "states": [{"id": "Idle"}, {"id": "Reasoning", "node": "think"}, {"id": "Completed"}],
        "transitions": [{"from": "Idle", "to": "Reasoning"},
                        {"from": "Reasoning", "to": "Completed"}]}
    doc.update(changes)
    return WorkflowSpec.model_validate(doc)


SCOPE: dict[str, Any] = {"input": {"ready": False}, "variables": {}, "metadata": {}}


def test_hypha_scenario_2_transitions() -> None:
    fsm = Fsm(spec())
    with pytest.raises(TransitionRejected) as info:
        fsm.check("Idle", "Completed", SCOPE)
    assert info.value.reason == "not_allowed"
    guarded = Fsm(spec(transitions=[{"from": "Idle", "to": "Reasoning",
                                     "guard": "input.ready == true"},
                                    {"from": "Reasoning", "to": "Completed"}]))
    with pytest.raises(TransitionRejected) as info:
        guarded.check("Idle", "Reasoning", SCOPE)
    assert info.value.reason == "guard_rejected"
    ready = {**SCOPE, "input": {"ready": True}}
    assert guarded.check("Idle", "Reasoning", ready).to == "Reasoning"
    review = Fsm(spec(states=[{"id": "Idle"}, {"id": "Completed"},
                              {"id": "Reasoning", "human_review": {"required": True}}]))
    with pytest.raises(TransitionRejected) as info:
        review.check("Idle", "Reasoning", SCOPE)
    assert info.value.reason == "human_review_required"
    assert review.check("Idle", "Reasoning", SCOPE, approved=True).to == "Reasoning"
    denied = Fsm(spec(), policy=lambda cap: (cap != "fsm:wf:Idle->Reasoning", "not today"))
    with pytest.raises(TransitionRejected, match="not today") as info:
        denied.check("Idle", "Reasoning", SCOPE)
    assert info.value.reason == "policy_denied"


def test_choose_takes_the_first_declared_transition_whose_guard_holds() -> None:
    fsm = Fsm(spec(states=[{"id": "Idle"}, {"id": "A"}, {"id": "B"}, {"id": "Completed"}],
                   transitions=[{"from": "Idle", "to": "A", "guard": "score >= 3"},
                                {"from": "Idle", "to": "B", "guard": "default"},
                                {"from": "A", "to": "Completed"},
                                {"from": "B", "to": "Completed"}]))
    assert fsm.choose("Idle", {"variables": {"score": 5}}).to == "A"
    assert fsm.choose("Idle", {"variables": {"score": 1}}).to == "B"
    with pytest.raises(TransitionRejected) as info:
        fsm.choose("Completed", SCOPE)
    assert info.value.reason == "not_allowed"


def test_every_workflow_gets_the_recovery_envelope() -> None:
    fsm = Fsm(spec())
    assert set(RECOVERY_STATES) <= set(fsm.states)
    for work in ("Idle", "Reasoning"):
        for envelope in RECOVERY_STATES:
            assert fsm.edge(work, envelope) is not None
    assert fsm.edge("Recovering", "Reasoning") is not None
    assert fsm.edge("Completed", "Failed") is None  # terminal: no way out
    assert (fsm.status_of("Completed"), fsm.status_of("Failed"),
            fsm.status_of("Cancelled"), fsm.status_of("Idle")) == (
        "completed", "failed", "cancelled", None)


def test_validation_lists_every_problem_with_its_path() -> None:
    bad = spec(states=[{"id": "Idle"}, {"id": "Idle"}, {"id": "Completed",
                                                        "retry": {"max_attempts": 2}}],
               terminal_states=["Completed", "Nowhere"],
               transitions=[{"from": "Idle", "to": "Ghost"},
                            {"from": "Idle", "to": "Completed", "guard": "x == 1"},
                            {"from": "Idle", "to": "Completed", "guard": "x == 1"},
                            {"from": "Idle", "to": "Completed", "guard": "(("}])
    with pytest.raises(WorkflowSpecError) as info:
        Fsm(bad, nodes={"think": object()})
    paths = dict(info.value.problems)
    assert "duplicate state 'Idle'" in paths["states[1].id"]
    assert "unknown state 'Nowhere'" in paths["terminal_states[1]"]
    assert "cannot retry" in paths["states[2].retry"]
    assert "unknown state 'Ghost'" in paths["transitions[0].to"]
    assert "duplicate transition" in paths["transitions[2]"]
    assert "transitions[3].guard" in paths
    with pytest.raises(WorkflowSpecError, match=r"states\[1\].node: unknown node 'think'"):
        Fsm(spec(), nodes={})


def test_spec_fields_are_strict() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        spec(extra_field=1)
    with pytest.raises(ValidationError):
        WorkflowSpec.model_validate({"id": "wf", "initial_state": "A", "terminal_states": [],
                                     "states": [{"id": "A"}]})
