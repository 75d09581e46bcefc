"""hypha's pack shapes load into the one model: lists of versioned entries
(``taskSchemas``, ``outputContracts``, ``sessionProfiles``, ``toolProfiles``), a task
schema naming its workflow and contract, ``*Ref`` / ``*Refs`` fields, ``sideEffectLevel``,
``requiredChecks``; hypha keys with nothing to drive here are accepted and ignored; a
shape we cannot honour is a problem naming its key (never a silent drop)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hypha_celery.errors import PackError
from hypha_celery.packs import compile_all, load_pack, parse_pack
from tests.cli.helpers import hypha
from tests.packs.test_spelling import graph_shape
from tests.runtime.support import WAIT, running

HYPHA = Path(__file__).with_name("lookup.hypha.yaml")
OURS = Path(__file__).with_name("lookup.yaml")


def hypha_doc() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(HYPHA.read_text(encoding="utf-8"))
    return loaded


def problems_of(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(PackError) as info:
        parse_pack(doc)
    return info.value.problems


def test_the_hypha_shaped_file_is_its_snake_case_twin() -> None:
    theirs, ours = load_pack(HYPHA), load_pack(OURS)
    assert theirs == ours
    wf = theirs.workflow()
    assert (wf.task_schema, wf.output_contract) == ("task.question", "output.answer")
    profile = theirs.session_profiles["desk"]
    assert (profile.tool_profile, profile.policy) == ("shelf", "policy.read-only")
    assert theirs.tool_profiles == {"shelf": ["shelf.search"]}
    assert theirs.tools[0].spec.side_effect == "read"
    assert theirs.policies[0].rules[0].side_effects == ["none", "read"]
    assert theirs.regression_cases[0].checks == ["event_types", "state_path", "output"]
    assert wf.states[1].retry is not None and wf.states[1].retry.max_attempts == 2


def test_both_compile_to_equal_graphs() -> None:
    theirs, ours = compile_all(load_pack(HYPHA)), compile_all(load_pack(OURS))
    assert theirs.keys() == ours.keys() == {"lookup", "lookup--desk"}
    for graph_id in theirs:
        assert graph_shape(theirs[graph_id]) == graph_shape(ours[graph_id])


def test_both_run_the_same(sqlite_url: str) -> None:
    outcomes = []
    for file in (HYPHA, OURS):
        with running(sqlite_url) as app:
            app.register(compile_all(load_pack(file))["lookup"])
            run = app.start("lookup", {"query": "where is the atlas?"})
            outcomes.append((run.wait(WAIT), app.store.get(run.id)["fsm"]["path"]))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == ({"text": "see the shelf, row 3"},
                           ["Intake", "Search", "Answer", "Completed"])


def test_show_json_prints_our_spelling_and_shapes() -> None:
    theirs = hypha("pack", "show", str(HYPHA), "--json")
    assert theirs.returncode == 0, theirs.stderr
    doc = json.loads(theirs.stdout)
    assert doc == json.loads(hypha("pack", "show", str(OURS), "--json").stdout)
    assert doc["task_schemas"]["task.question"]["required"] == ["query"]
    assert doc["session_profiles"] == {"desk": {
        "description": "", "default_metadata": {"desk": "front", "shift": "day"},
        "tool_profile": "shelf", "policy": "policy.read-only"}}
    assert "taskSchemas" not in doc and "deploymentProfile" not in doc


@pytest.mark.parametrize(("edit", "where", "says"), [
    (lambda d: d["workflows"][0]["states"][1].update(timeoutPolicy={"timeoutMs": 30000}),
     "workflows[0].states[1]", "timeoutPolicy: not supported"),
    (lambda d: d.update(mcpProfiles=[{"id": "mcp.local", "servers": []}]),
     "mcp_profiles", "MCPIntegrationSpec list (servers, allowedCapabilities"),
    (lambda d: d["sessionProfiles"][0].update(defaultPolicyRefs=["a", "b"]),
     "session_profiles.desk.policy", "defaultPolicyRefs: one policy governs a run here"),
    (lambda d: d["sessionProfiles"][0].update(metadataSchema={"type": "object"}),
     "session_profiles.desk", "metadataSchema: not supported"),
    (lambda d: d["regressionCases"][0].update(fixtureRefs=[{"id": "f", "version": "1"}]),
     "regression_cases[0]", "fixtureRefs: not supported"),
    (lambda d: d["tools"][0].update(permissionScope=["docs:read"]),
     "tools[0]", "permissionScope: not supported"),
    (lambda d: d["taskSchemas"][0].update(riskProfile={"defaultRiskLevel": "low"}),
     "task_schemas", "taskSchemas[0].riskProfile: not supported here"),
    (lambda d: d["outputContracts"][0].pop("schema"),
     "output_contracts", "outputContracts[0].schema: an output contract needs one"),
])
def test_a_shape_we_cannot_honour_is_a_problem_naming_it(edit: Any, where: str,
                                                         says: str) -> None:
    doc = hypha_doc()
    edit(doc)
    found = problems_of(doc)
    assert any(w == where and says in m for w, m in found), found


def test_a_task_schema_binding_a_workflow_twice_is_a_problem() -> None:
    doc = hypha_doc()
    doc["workflows"][0]["taskSchema"] = "task.other"
    assert problems_of(doc) == [("", "taskSchemas[0]: binds workflow 'lookup' to "
                                     "'task.question', but the workflow names 'task.other'")]
    unknown = hypha_doc()
    unknown["taskSchemas"][0]["defaultWorkflowRef"] = "nowhere"
    assert problems_of(unknown) == [
        ("", "taskSchemas[0].defaultWorkflowRef: unknown workflow 'nowhere'")]


def test_list_entries_need_unique_ids() -> None:
    doc = hypha_doc()
    doc["outputContracts"].append(copy.deepcopy(doc["outputContracts"][0]))
    assert ("output_contracts", "outputContracts[1]: duplicate id 'output.answer'") in \
        problems_of(doc)


def test_ignored_keys_are_ignored_and_unknown_ones_are_still_refused() -> None:
    doc = hypha_doc()
    doc["businessRules"] = [{"id": "rule", "scope": "output", "effect": "guidance"}]
    assert parse_pack(doc) == load_pack(OURS)
    doc["business_rules"] = []  # hypha has no snake_case spelling of what it ignores
    doc["workflows"][0]["states"][0]["allowedSkillz"] = []
    assert sorted(problems_of(doc)) == [("business_rules", "unknown field"),
                                        ("workflows[0].states[0].allowedSkillz",
                                         "unknown field")]
