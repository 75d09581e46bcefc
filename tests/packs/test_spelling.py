"""hypha's pack files load unchanged: a pack in hypha's camelCase spelling is the same
pack as its snake_case twin (one model with aliases), compiles to the same graphs, runs
the same, and is written back in our spelling; both spellings in one mapping, and
unknown keys, are problems with their paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hypha_celery.errors import PackError
from hypha_celery.fsm import WorkflowPolicy
from hypha_celery.graph import Graph
from hypha_celery.packs import (
    DomainPack,
    compile_all,
    load_pack,
    overlay,
    parse_pack,
)
from hypha_celery.packs._model import _Aliased
from tests.cli.helpers import hypha
from tests.packs import EXAMPLE
from tests.packs.spelling import camel_doc, models_of
from tests.runtime.support import WAIT, running

CAMEL = Path(__file__).with_name("support_triage.hypha.yaml")


def snake_doc() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    return loaded


def graph_shape(graph: Graph) -> dict[str, Any]:
    """What a compiled graph is: its nodes (function, queue, limits) and its FSM (states,
    every edge with its guard, the spec)."""
    policy = graph.decision_policy
    assert isinstance(policy, WorkflowPolicy)
    fsm = policy.fsm
    return {
        "id": graph.id,
        "nodes": {name: (node.fn.__module__, node.fn.__qualname__, node.queue, node.timeout,
                         node.retry, node.side_effect)
                  for name, node in graph.nodes.items()},
        "limits": (graph.max_steps, graph.execution_timeout, graph.node_timeout,
                   graph.on_node_error),
        "states": {sid: state.model_dump() for sid, state in fsm.states.items()},
        "edges": {sid: [t.to_json() for t in out] for sid, out in fsm.out.items()},
        "spec": fsm.spec.model_dump(mode="json"),
    }


def test_the_camel_case_file_is_the_same_pack() -> None:
    camel, snake = load_pack(CAMEL), load_pack(EXAMPLE)
    assert camel == snake
    state = camel.workflow().states[4]
    assert state.id == "Refund" and state.human_review is not None  # humanReviewPolicy
    assert state.human_review.required
    assert camel.session_profiles["web-chat"].default_metadata == {"channel": "web",
                                                                   "locale": "en"}
    assert [c.id for c in camel.regression_cases] == ["password-question-path"]


def test_both_spellings_compile_to_the_same_graphs() -> None:
    camel, snake = compile_all(load_pack(CAMEL)), compile_all(load_pack(EXAMPLE))
    assert camel.keys() == snake.keys() == {"support-triage"}
    for graph_id in camel:
        assert graph_shape(camel[graph_id]) == graph_shape(snake[graph_id])


def test_a_generated_camel_twin_loads_as_the_same_pack() -> None:
    """Every field of every nested model, spelled as its camelCase alias (the converter
    walks the models, so a field added later is covered too)."""
    doc = camel_doc(snake_doc())
    assert "taskSchemas" in doc and "initialState" in doc["workflows"][0]
    assert "inputSchema" in doc["tools"][0] and "sideEffect" in doc["tools"][0]
    assert parse_pack(doc) == load_pack(EXAMPLE)


def test_every_nested_model_of_a_pack_reads_both_spellings() -> None:
    seen: set[type[Any]] = set()
    todo: list[type[Any]] = [DomainPack]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        assert issubclass(model, _Aliased), f"{model.__name__} does not read camelCase keys"
        for info in model.model_fields.values():
            todo += models_of(info.annotation)
    assert len(seen) >= 10  # pack, workflow, state, review, retry, node, tool, spec, ...


def test_both_spellings_run_the_same(sqlite_url: str) -> None:
    ticket = {"text": "how do I reset my password?"}
    outcomes = []
    for file in (CAMEL, EXAMPLE):
        pack = load_pack(file)
        with running(sqlite_url) as app:
            app.register(compile_all(pack)["support-triage"])
            run = app.start("support-triage", ticket)
            result = run.wait(WAIT)
            outcomes.append((result, app.store.get(run.id)["fsm"]["path"],
                             [e.kind for e in run.events()]))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] == ["Intake", "Route", "Search", "Answer", "Done"]


def test_show_json_writes_our_spelling() -> None:
    camel = hypha("pack", "show", str(CAMEL), "--json")
    snake = hypha("pack", "show", str(EXAMPLE), "--json")
    assert camel.returncode == 0, camel.stderr
    doc = json.loads(camel.stdout)
    assert doc == json.loads(snake.stdout)
    assert "session_profiles" in doc and "sessionProfiles" not in doc
    assert doc["workflows"][0]["states"][4]["human_review"]["required"] is True
    assert doc["tools"][0]["side_effect"] == "read"


def problems_of(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(PackError) as info:
        parse_pack(doc)
    return info.value.problems


def test_both_spellings_of_one_field_is_a_problem() -> None:
    doc = camel_doc(snake_doc())
    doc["default_workflow"] = doc["defaultWorkflow"]
    assert problems_of(doc) == [("", "default_workflow and defaultWorkflow are one field: "
                                     "give one of them")]
    state = camel_doc(snake_doc())
    state["workflows"][0]["states"][4]["human_review"] = {"required": True}
    assert problems_of(state) == [(
        "workflows[0].states[4]",
        "human_review and humanReview are one field: give one of them")]


def test_mixed_spellings_in_one_mapping_are_a_problem() -> None:
    doc = camel_doc(snake_doc())
    doc["session_profiles"] = doc.pop("sessionProfiles")
    ((where, message),) = problems_of(doc)
    assert where == ""
    assert message.startswith("one mapping mixes camelCase (")
    assert "(session_profiles) keys: write it in one spelling" in message
    tool = snake_doc()
    tool["tools"][0]["sideEffect"] = tool["tools"][0].pop("side_effect")
    ((where, message),) = problems_of(tool)
    assert where == "tools[0]"
    assert "mixes camelCase (sideEffect) and snake_case (input_schema)" in message


def test_unknown_keys_are_still_refused_in_either_spelling() -> None:
    doc = camel_doc(snake_doc())
    doc["workflows"][0]["states"][0]["humanReviewPolicyy"] = {"required": True}
    doc["evaluationCase"] = []
    assert sorted(problems_of(doc)) == [
        ("evaluationCase", "unknown field"),
        ("workflows[0].states[0].humanReviewPolicyy", "unknown field")]


def test_a_camel_case_pack_keeps_its_other_problems_with_paths() -> None:
    doc = camel_doc(snake_doc())
    doc["defaultWorkflow"] = "triage"
    doc["nodes"]["refund"]["tool"] = "billing.refunds"
    doc["tools"][0]["sideEffect"] = "explosive"
    found = dict(problems_of(doc))
    assert found["default_workflow"].startswith("unknown workflow 'triage'")
    assert found["nodes.refund.tool"].startswith("unknown tool 'billing.refunds'")
    assert "side_effect: Input should be 'none', 'read'" in found["tools[0]"]


def test_a_camel_case_overlay_upserts_by_id() -> None:
    base = load_pack(CAMEL)
    extended = overlay(base, {"version": "1.1.0", "evaluationCases": [
        {"id": "complaint", "workflow": "support-triage", "input": {"text": "bad service"}},
        {"id": "close-account", "remove": True}]})
    assert [c.id for c in extended.evaluation_cases] == ["password-question", "complaint"]
    assert extended.evaluation_cases[1].input == {"text": "bad service"}
