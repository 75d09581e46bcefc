"""Loading a DomainPack: shape and references checked at load, every problem reported at
once with its path; overlays (upsert / remove, ``extends``); the ``id@version`` registry;
input validation; compile-time problems (code that does not import)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from hypha_celery.errors import PackError, SpecError
from hypha_celery.graph import Graph
from hypha_celery.packs import (
    DomainPack,
    PackRegistry,
    compile_all,
    compile_pack,
    load_pack,
    overlay,
    parse_pack,
    transition_policy,
    validate_input,
    version_key,
    workflow_policy,
)
from hypha_celery.tools import ToolPolicy
from tests.packs import EXAMPLE


@pytest.fixture
def doc() -> dict[str, Any]:
    """The example pack's document: a fresh copy per test, to break."""
    loaded: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    return loaded


def paths(exc: pytest.ExceptionInfo[PackError]) -> list[str]:
    return [p for p, _ in exc.value.problems]


def message(exc: pytest.ExceptionInfo[PackError], where: str) -> str:
    return next(m for p, m in exc.value.problems if p == where)


def state_index(doc: dict[str, Any], state_id: str) -> int:
    return next(i for i, s in enumerate(doc["workflows"][0]["states"]) if s["id"] == state_id)


# -- a valid pack --------------------------------------------------------------------------
def test_the_example_pack_loads() -> None:
    pack = load_pack(EXAMPLE)
    assert pack.ref == "support-triage@1.0.0"
    wf = pack.workflow()
    assert (wf.id, wf.task_schema, wf.output_contract, wf.tool_profile) == (
        "support-triage", "ticket", "reply", "support")
    assert {n: d.kind for n, d in pack.nodes.items()} == {
        "classify": "code", "search_kb": "tool", "answer": "code", "refund": "tool",
        "confirm_refund": "code", "close_account": "tool", "account_closed": "set",
        "escalate": "code"}
    refund = pack.tool("billing.refund")
    assert refund is not None and refund.spec.side_effect == "write"
    assert refund.handler == "examples.packs.support_triage.nodes:refund"
    assert pack.policy(wf.policy or "") == ToolPolicy.default()
    assert pack.session_profiles["web-chat"].default_metadata == {"channel": "web",
                                                                 "locale": "en"}
    assert [c.id for c in pack.evaluation_cases] == ["password-question", "complaint",
                                                     "close-account"]


def test_a_pack_round_trips_through_its_document() -> None:
    pack = load_pack(EXAMPLE)
    doc = pack.to_doc()
    assert json.loads(json.dumps(doc)) == doc
    assert doc["tools"][1]["id"] == "billing.refund" and "spec" not in doc["tools"][1]
    assert parse_pack(doc) == pack


def test_a_json_pack_file_loads(tmp_path: Path) -> None:
    file = tmp_path / "pack.json"
    file.write_text(json.dumps(load_pack(EXAMPLE).to_doc()), encoding="utf-8")
    assert load_pack(file) == load_pack(EXAMPLE)


def test_every_workflow_compiles_to_a_graph() -> None:
    graphs = compile_all(load_pack(EXAMPLE))
    assert list(graphs) == ["support-triage"]
    graph = graphs["support-triage"]
    assert isinstance(graph, Graph)
    assert set(graph.nodes) == {"classify", "search_kb", "answer", "refund", "confirm_refund",
                                "close_account", "account_closed", "escalate"}
    assert graph.nodes["refund"].side_effect == "none"  # a write: idempotent delivery
    assert graph.nodes["close_account"].side_effect == "irreversible"  # at most once


# -- every problem, with its path, at once ---------------------------------------------------
def test_every_broken_reference_is_reported_at_once(doc: dict[str, Any]) -> None:
    wf = doc["workflows"][0]
    wf["states"][state_index(doc, "Answer")]["node"] = "reply_node"
    wf["transitions"][1]["guard"] = "intent == 'refund' &&"
    wf["transitions"][2]["to"] = "Nowhere"
    wf["output_contract"] = "answer"
    wf["tool_profile"] = "everything"
    wf["policy"] = "strict"
    doc["nodes"]["refund"]["tool"] = "billing.refunds"
    doc["task_schemas"]["extra"] = {"type": "nope"}
    doc["tool_profiles"]["support"].append("crm.lookup")
    doc["default_workflow"] = "triage"
    doc["default_policy"] = "lenient"
    doc["session_profiles"]["web-chat"]["tool_profile"] = "web"
    doc["evaluation_cases"][0]["input"] = {"txt": "hi"}
    doc["regression_cases"][0]["workflow"] = "old-triage"
    doc["regression_cases"][0]["checks"].append("vibes")
    with pytest.raises(PackError) as info:
        parse_pack(doc)
    assert sorted(paths(info)) == sorted([
        "workflows[0].states[3].node", "workflows[0].transitions[1].guard",
        "workflows[0].transitions[2].to", "workflows[0].output_contract",
        "workflows[0].tool_profile", "workflows[0].policy",
        "nodes.refund.tool", "task_schemas.extra", "tool_profiles.support[3]",
        "default_workflow", "default_policy", "session_profiles.web-chat.tool_profile",
        "evaluation_cases[0].input.text", "evaluation_cases[0].input.txt",
        "regression_cases[0].workflow", "regression_cases[0].checks[4]"])
    assert message(info, "nodes.refund.tool") == (
        "unknown tool 'billing.refunds' (known: accounts.close, billing.refund, kb.search)")
    assert message(info, "workflows[0].states[3].node") == "unknown node 'reply_node'"
    assert "end of expression" in message(info, "workflows[0].transitions[1].guard") \
        or "expected" in message(info, "workflows[0].transitions[1].guard")
    assert message(info, "task_schemas.extra").startswith("not a valid JSON Schema (at type)")
    assert message(info, "default_workflow") == (
        "unknown workflow 'triage' (known: support-triage)")
    assert isinstance(info.value, SpecError)
    assert str(info.value).count(";") == len(info.value.problems) - 1  # one readable line


def test_shape_problems_come_with_reference_problems(doc: dict[str, Any]) -> None:
    """A tool whose spec is broken is left out, but references to it are not reported
    again; the other problems are still found."""
    doc["tools"][1]["input_schema"] = {"type": "objekt"}
    doc["tools"][2]["side_effect"] = "explosive"
    doc["session_profiles"]["web-chat"]["bogus"] = True
    doc["nodes"]["classify"] = {"code": "examples.packs.support_triage.nodes:classify",
                                "set": {"x": 1}}
    doc["nodes"]["answer"]["code"] = "not a ref"
    doc["tools"].append(copy.deepcopy(doc["tools"][0]))
    doc["workflows"][0]["task_schema"] = "tickets"
    doc["version"] = 1.1
    doc["surprise"] = 1
    with pytest.raises(PackError) as info:
        parse_pack(doc)
    assert sorted(paths(info)) == sorted([
        "tools[1]", "tools[2]", "session_profiles.web-chat.bogus", "nodes.classify",
        "nodes.answer.code", "tools[3].id", "version", "surprise",
        "workflows[0].task_schema"])
    assert "input_schema: the schema is not a valid JSON Schema" in message(info, "tools[1]")
    assert message(info, "session_profiles.web-chat.bogus") == "unknown field"
    assert message(info, "nodes.classify") == (
        "a node is exactly one of code, tool or set, got code and set")
    assert message(info, "tools[3].id") == "duplicate id 'kb.search' (also tools[0])"
    assert "write the version as a string" in message(info, "version")


def test_positions_survive_left_out_entries(doc: dict[str, Any]) -> None:
    """A broken entry is left out before references are checked; later entries keep their
    place in the paths."""
    doc["evaluation_cases"][0] = {"id": "broken"}  # no workflow: a shape problem
    doc["evaluation_cases"][2]["workflow"] = "nope"
    with pytest.raises(PackError) as info:
        parse_pack(doc)
    assert paths(info) == ["evaluation_cases[0].workflow", "evaluation_cases[2].workflow"]


def test_a_state_bound_to_a_terminal_or_a_missing_state_is_a_workflow_problem(
        doc: dict[str, Any]) -> None:
    wf = doc["workflows"][0]
    wf["initial_state"] = "Start"
    wf["states"].append({"id": "Intake"})
    wf["transitions"].append({"from": "Done", "to": "Intake"})
    wf["id"] = "support.triage"
    with pytest.raises(PackError) as info:
        parse_pack(doc)
    assert sorted(paths(info)) == sorted([
        "workflows[0].id", "workflows[0].initial_state", "workflows[0].states[10].id",
        "workflows[0].transitions[14].from", "default_workflow",
        "session_profiles.web-chat.workflow", "evaluation_cases[0].workflow",
        "evaluation_cases[1].workflow", "evaluation_cases[2].workflow",
        "regression_cases[0].workflow"])


@pytest.mark.parametrize(("text", "where", "needle"), [
    ("", "", "an empty file"),
    ("- a\n- b\n", "", "not list"),
    ("id: [unclosed\n", "", "not valid YAML"),
    ("id: x\nwhen: 2024-01-01\n", "when", "a date is not JSON"),
])
def test_a_file_that_is_not_a_pack(tmp_path: Path, text: str, where: str, needle: str) -> None:
    file = tmp_path / "pack.yaml"
    file.write_text(text, encoding="utf-8")
    with pytest.raises(PackError) as info:
        load_pack(file)
    assert any(p == where and needle in m for p, m in info.value.problems), \
        info.value.problems


def test_a_yaml_error_names_its_line(tmp_path: Path) -> None:
    file = tmp_path / "pack.yaml"
    file.write_text("id: x\nname: y\nversion: '1'\nworkflows: [}\n", encoding="utf-8")
    with pytest.raises(PackError) as info:
        load_pack(file)
    assert "(line 4, column" in info.value.problems[0][1]


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="cannot read it"):
        load_pack(tmp_path / "nope.yaml")


# -- overlays ---------------------------------------------------------------------------------
def test_an_overlay_upserts_and_removes_by_id(doc: dict[str, Any]) -> None:
    base = parse_pack(doc)
    wf = copy.deepcopy(doc["workflows"][0])
    wf["description"] = "v2"
    new_tool = {"id": "crm.lookup", "side_effect": "read", "input_schema": {}, "mock": {}}
    derived = overlay(base, {
        "version": "1.1.0",
        "workflows": [wf],
        "tools": [new_tool, {"id": "kb.search", "remove": True}],
        "nodes": {"search_kb": {"tool": "crm.lookup", "output_to": "kb"}},
        "tool_profiles": {"support": ["crm.*", "billing.refund", "accounts.close"]},
        "output_contracts": {"spare": {"type": "object"}},
        "session_profiles": {"web-chat": {"remove": True}},
    })
    assert derived.ref == "support-triage@1.1.0"
    assert [w.description for w in derived.workflows] == ["v2"]
    assert [t.id for t in derived.tools] == ["billing.refund", "accounts.close", "crm.lookup"]
    assert derived.nodes["search_kb"].tool == "crm.lookup"
    assert set(derived.output_contracts) == {"reply", "spare"}
    assert derived.session_profiles == {}
    assert base.ref == "support-triage@1.0.0"  # the base is unchanged


def test_an_overlay_is_validated_as_a_whole(doc: dict[str, Any]) -> None:
    base = parse_pack(doc)
    with pytest.raises(PackError) as info:
        overlay(base, {"tools": [{"id": "billing.refund", "remove": True},
                                 {"id": "crm.nothing", "remove": True}],
                       "nodes": {"gone": {"remove": True}}})
    assert sorted(paths(info)) == ["nodes.gone", "nodes.refund.tool",
                                   "tool_profiles.support[1]", "tools[1]"]
    assert "cannot remove 'crm.nothing'" in message(info, "tools[1]")


def test_a_pack_file_extends_a_base_by_relative_path(tmp_path: Path) -> None:
    """team/pack.yaml -> ../base.yaml -> the example: paths relative to each file."""
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "pack.yaml").write_text(yaml.safe_dump({
        "extends": "../base.yaml", "version": "2.0.0",
        "policies": [{"id": "lenient", "default_effect": "allow"}],
        "default_policy": "lenient"}), encoding="utf-8")
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({
        "extends": os.path.relpath(EXAMPLE, tmp_path), "name": "Base"}), encoding="utf-8")
    pack = load_pack(tmp_path / "team" / "pack.yaml")
    assert (pack.ref, pack.name) == ("support-triage@2.0.0", "Base")
    assert [p.id for p in pack.policies] == ["lenient"]
    assert pack.workflow().id == "support-triage"


def test_an_extends_cycle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n", encoding="utf-8")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n", encoding="utf-8")
    with pytest.raises(PackError, match="already in the extends chain"):
        load_pack(tmp_path / "a.yaml")


def test_a_missing_base_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: base.yaml\n", encoding="utf-8")
    with pytest.raises(PackError) as info:
        load_pack(tmp_path / "a.yaml")
    assert info.value.problems == [("extends", "base.yaml: cannot read it: "
                                               "No such file or directory")]


# -- the registry -----------------------------------------------------------------------------
def test_the_registry_keys_packs_by_id_at_version_and_tracks_the_latest(
        doc: dict[str, Any]) -> None:
    v1 = parse_pack(doc)
    v19 = overlay(v1, {"version": "1.9.0"})
    v110 = overlay(v1, {"version": "1.10.0"})
    registry = PackRegistry()
    for pack in (v19, v110, v1):
        registry.add(pack)
    assert registry.add(v1) is v1  # the same pack again: nothing changes
    assert len(registry) == 3
    assert registry.get("support-triage@1.9.0") is v19
    assert registry.get("support-triage") is v110
    assert registry.latest("support-triage@1.0.0") is v110
    assert registry.versions("support-triage") == ["1.0.0", "1.9.0", "1.10.0"]
    assert "support-triage@1.10.0" in registry and "support-triage" in registry
    with pytest.raises(PackError, match="a different pack support-triage@1.0.0"):
        registry.add(overlay(v1, {"name": "Other"}))
    with pytest.raises(KeyError, match="no pack 'billing'"):
        registry.get("billing")
    assert version_key("1.10.0") > version_key("1.9.2") > version_key("1.9")


# -- input and compile-time problems --------------------------------------------------------
def test_input_is_checked_against_the_task_schema() -> None:
    pack = load_pack(EXAMPLE)
    validate_input(pack, None, {"text": "hi", "order": "A-1"})
    with pytest.raises(PackError) as info:
        validate_input(pack, "support-triage", {"order": "bad", "note": 1})
    assert paths(info) == ["$.note", "$.order", "$.text"]
    with pytest.raises(PackError, match="has no workflow 'nope'"):
        validate_input(pack, "nope", {})


def test_code_that_does_not_load_is_a_compile_problem(doc: dict[str, Any]) -> None:
    doc["nodes"]["classify"]["code"] = "examples.packs.support_triage.nodes:nope"
    doc["nodes"]["escalate"]["code"] = "examples.packs.no_such_module:escalate"
    doc["tools"][1]["handler"] = "examples.packs.support_triage.nodes:LEDGER"
    pack = parse_pack(doc)  # the shape and the references are fine
    with pytest.raises(PackError) as info:
        compile_pack(pack)
    assert sorted(paths(info)) == ["nodes.classify.code", "nodes.escalate.code",
                                   "tools[1].handler"]
    assert "has no attribute 'nope'" in message(info, "nodes.classify.code")
    assert "no module named" in message(info, "nodes.escalate.code")
    assert message(info, "tools[1].handler").endswith("is a list, not a function")


def test_compile_refuses_a_pack_built_in_code_with_broken_references(
        doc: dict[str, Any]) -> None:
    doc["default_workflow"] = "nope"
    pack = DomainPack.model_validate(doc)  # the shape alone: references unchecked
    with pytest.raises(PackError, match="default_workflow: unknown workflow 'nope'"):
        compile_pack(pack, "support-triage")


def test_transitions_go_through_the_workflows_policy(doc: dict[str, Any]) -> None:
    doc["policies"] = [
        {"id": "guarded", "default_effect": "allow", "rules": [
            {"id": "no-closing", "effect": "deny",
             "scopes": ["fsm:support-triage:Route->CloseAccount"],
             "reason": "accounts are closed by the back office"}]},
        {"id": "closed-world", "default_effect": "deny"}]
    doc["workflows"][0]["policy"] = "guarded"
    pack = parse_pack(doc)
    decide = transition_policy(workflow_policy(pack, pack.workflow()))
    assert decide("fsm:support-triage:Route->CloseAccount") == (
        False, "accounts are closed by the back office")
    assert decide("fsm:support-triage:Route->Search")[0] is True
    closed = transition_policy(pack.policy("closed-world") or ToolPolicy.default())
    assert closed("fsm:support-triage:Intake->Route")[0] is False


def test_a_tool_node_bound_by_states_with_different_tools_is_refused(
        doc: dict[str, Any]) -> None:
    states = doc["workflows"][0]["states"]
    states[state_index(doc, "Search")]["tools"] = ["kb.search"]
    states.insert(3, {"id": "SearchAgain", "node": "search_kb"})
    pack = parse_pack(doc)
    with pytest.raises(PackError) as info:
        compile_pack(pack)
    assert paths(info) == ["nodes.search_kb"]
