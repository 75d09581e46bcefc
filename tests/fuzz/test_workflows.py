"""Fuzzing workflow loading (:mod:`hypha_celery.fsm`): the example pack's workflow (and
arbitrary documents) with values changed, dropped or added. ``WorkflowSpec`` refuses a
bad shape with pydantic's ``ValidationError`` (it is a pydantic model: that is its
documented error); a spec that validates makes an :class:`Fsm` or a
:class:`WorkflowSpecError`; an FSM's moves over any scope are a transition or a
:class:`TransitionRejected`; its graph builds or is a ``GraphSpecError``."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from hypha_celery.errors import GraphSpecError, TransitionRejected, WorkflowSpecError
from hypha_celery.fsm import Fsm, WorkflowSpec, workflow_graph
from tests.fuzz._mutate import JSON, mutated, tally
from tests.fuzz.conftest import budget
from tests.fuzz.test_guards import SCOPES

EXAMPLE = Path(__file__).parents[2] / "examples" / "packs" / "support_triage" / "pack.yaml"
WORKFLOW: dict[str, Any] = {
    k: v for k, v in yaml.safe_load(EXAMPLE.read_text())["workflows"][0].items()
    if k not in ("task_schema", "output_contract", "tool_profile", "policy")}
NAMES = st.sampled_from(["Intake", "Route", "Search", "Done", "Failed", "Recovering",
                         "HumanReview", "Cancelled", "classify", "answer", "x"])
VALUES = NAMES | NAMES | JSON | st.sampled_from([
    "intent == 'refund'", "!(", "matches(a, '(a+)+')", "else:", "(" * 80, "1e999"])


def _node(state: dict[str, Any], input: Any) -> dict[str, Any]:
    return {}


def machine(doc: Any) -> Fsm | None:
    try:
        spec = WorkflowSpec.model_validate(doc)
    except ValidationError:
        tally("shape refused")
        return None
    nodes = {s.node: _node for s in spec.states if s.node is not None}
    try:
        fsm = Fsm(spec, nodes)
    except WorkflowSpecError as exc:
        assert exc.problems
        tally("rules refused")
        return None
    tally("made an FSM")
    try:
        workflow_graph(fsm, nodes)
    except GraphSpecError:
        tally("graph refused")
    return fsm


def moves(fsm: Fsm, scope: dict[str, Any]) -> None:
    for source in fsm.states:
        assert fsm.status_of(source) in (None, "completed", "failed", "cancelled")
        with contextlib.suppress(TransitionRejected):
            fsm.choose(source, scope)
        for target in list(fsm.states)[:6]:
            try:
                fsm.check(source, target, scope)
            except TransitionRejected as exc:
                assert exc.reason in TransitionRejected.REASONS


def test_the_example_workflow_makes_an_fsm() -> None:
    assert machine(WORKFLOW) is not None


@budget(400)
@given(st.data(), SCOPES)
def test_mutated_workflow(data: st.DataObject, scope: dict[str, Any]) -> None:
    fsm = machine(data.draw(mutated(WORKFLOW, VALUES)))
    if fsm is not None:
        moves(fsm, scope)


@budget(150)
@given(st.dictionaries(st.sampled_from(sorted(WORKFLOW)), VALUES, max_size=8) | JSON)
def test_arbitrary_workflow_documents(doc: Any) -> None:
    machine(doc)
