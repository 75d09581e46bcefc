"""hypha's own pack shapes, read into ours (the validators of :mod:`._model` call these).

hypha writes a pack's collections as lists of versioned entries (``taskSchemas: [{id,
version, inputSchema, outputContractRef, defaultWorkflowRef}]``, ``outputContracts: [{id,
schema}]``, ``sessionProfiles: [{id, defaultToolProfileRef, ...}]``, ``toolProfiles:
[{id, tools}]``) and refers to things by ``*Ref`` / ``*Refs`` (ids, or ``{id, version}``
refs). Ours are mappings by id and plain ids. The functions here turn the first into the
second before the models validate, so one model reads both; a key we cannot honour is a
``ValueError`` naming it (a problem of the pack, never a silent drop). What is accepted and
ignored is listed per model (``hypha_ignored``) and in docs/packs.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["DOC_IGNORED", "SPEC_META", "by_id", "link_task_schemas", "one_ref",
           "output_contract", "ref_ids", "session_profile", "task_schema", "tool_profile"]

#: Keys of hypha's versioned specs that carry no behaviour here (``SpecMetadata``).
SPEC_META = frozenset({"version", "name", "tags", "metadata"})

#: hypha's pack keys for what a graph of ours has no place for (skill policies, prompts,
#: memory, context and reasoning profiles, business rules, evaluation profiles,
#: deployment): accepted and ignored.
DOC_IGNORED = frozenset({
    "skillPolicies", "allowedPromptRefs",
    "defaultPromptRefs", "memoryProfiles", "contextProfiles", "reasoningProfiles",
    "defaultReasoningProfile", "businessRules", "evaluationProfiles", "deploymentProfile",
    "metadata", "tags"})

_TASK_KEYS = frozenset({"id", "inputSchema", "outputContractRef", "defaultWorkflowRef",
                        "taskType", "description", "defaultSkillRefs"}) | SPEC_META
_CONTRACT_KEYS = frozenset({"id", "schema", "description"}) | SPEC_META
_TOOL_PROFILE_KEYS = frozenset({"id", "tools", "description"}) | SPEC_META


def by_id(field: str, value: Any, entry: Callable[[str, dict[str, Any]], Any]) -> Any:
    """hypha's list of ``{id, ...}`` entries as our mapping ``id -> entry(where, it)``
    (a mapping, or anything else, is returned as it is)."""
    if not isinstance(value, list):
        return value
    out: dict[str, Any] = {}
    for i, item in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise ValueError(f"{where}: an entry of {field} is a mapping with an id")
        if item["id"] in out:
            raise ValueError(f"{where}: duplicate id {item['id']!r}")
        out[item["id"]] = entry(where, item)
    return out


def _only(where: str, item: dict[str, Any], keys: frozenset[str]) -> None:
    unknown = sorted(set(item) - keys)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: not supported here "
                         f"(known: {', '.join(sorted(keys))})")


def task_schema(where: str, item: dict[str, Any]) -> Any:
    """A ``TaskSchemaSpec``: its ``inputSchema``."""
    _only(where, item, _TASK_KEYS)
    if "inputSchema" not in item:
        raise ValueError(f"{where}.inputSchema: a task schema needs one")
    return item["inputSchema"]


def output_contract(where: str, item: dict[str, Any]) -> Any:
    """An ``OutputContractSpec``: its ``schema``."""
    _only(where, item, _CONTRACT_KEYS)
    if "schema" not in item:
        raise ValueError(f"{where}.schema: an output contract needs one")
    return item["schema"]


def tool_profile(where: str, item: dict[str, Any]) -> Any:
    """A ``ToolProfileSpec``: the ids of its ``tools`` (ids, or tool specs)."""
    _only(where, item, _TOOL_PROFILE_KEYS)
    return ref_ids(item.get("tools", []))


def session_profile(where: str, item: dict[str, Any]) -> Any:
    """A ``SessionProfileSpec`` without its id (the model reads the rest)."""
    return {k: v for k, v in item.items() if k != "id"}


def ref_ids(value: Any) -> Any:
    """A list of ids or of hypha refs (``{id, version}``, a tool spec) as ids."""
    if not isinstance(value, list):
        return value
    return [v["id"] if isinstance(v, dict) and isinstance(v.get("id"), str) else v
            for v in value]


def one_ref(value: Any) -> Any:
    """hypha's ``defaultPolicyRefs`` (a list) as our one policy: a run is governed by one
    policy here, so more than one is refused."""
    if not isinstance(value, list):
        return value
    ids = ref_ids(value)
    if len(ids) != 1:
        raise ValueError(f"defaultPolicyRefs: one policy governs a run here; got {len(ids)} "
                         f"({', '.join(map(str, ids)) or 'none'}): give one")
    return ids[0]


def link_task_schemas(doc: dict[str, Any]) -> dict[str, Any]:
    """hypha's ``taskSchemas`` list binds a task schema (and its ``outputContractRef``) to
    its ``defaultWorkflowRef``; ours names them on the workflow (``task_schema``,
    ``output_contract``). The list is read into the workflows it names (a workflow naming
    another schema or contract already, or an unknown workflow, is a ``ValueError``)."""
    key = "taskSchemas" if "taskSchemas" in doc else "task_schemas"
    entries = doc.get(key)
    workflows = doc.get("workflows")
    if not isinstance(entries, list) or not isinstance(workflows, list):
        return doc
    wfs = [dict(wf) if isinstance(wf, dict) else wf for wf in workflows]
    for i, item in enumerate(entries):
        if not isinstance(item, dict) or "defaultWorkflowRef" not in item:
            continue
        wanted = item["defaultWorkflowRef"]
        wf = next((w for w in wfs if isinstance(w, dict) and w.get("id") == wanted), None)
        if wf is None:
            raise ValueError(f"{key}[{i}].defaultWorkflowRef: unknown workflow {wanted!r}")
        _bind(wf, ("taskSchema", "task_schema"), item.get("id"), f"{key}[{i}]")
        if "outputContractRef" in item:
            _bind(wf, ("outputContract", "output_contract"), item["outputContractRef"],
                  f"{key}[{i}].outputContractRef")
    return {**doc, "workflows": wfs}


def _bind(wf: dict[str, Any], names: tuple[str, str], value: Any, where: str) -> None:
    """Set ``wf``'s field ``names`` (camelCase, snake_case: the workflow's spelling) to
    ``value`` unless it names something else already."""
    snake = any("_" in k for k in wf)
    have = wf.get(names[0], wf.get(names[1]))
    if have is not None and have != value:
        raise ValueError(f"{where}: binds workflow {wf.get('id')!r} to {value!r}, but the "
                         f"workflow names {have!r}")
    if have is None:
        wf[names[1] if snake else names[0]] = value
