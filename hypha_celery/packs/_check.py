"""Every reference inside a pack resolves, every schema is a JSON Schema, every workflow
makes an FSM: :func:`problems` lists what does not, as ``(path, message)``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from hypha_celery.evaluation._contracts import OutputContract
from hypha_celery.evaluation._regression import RegressionCheck
from hypha_celery.fsm import problems as workflow_problems
from hypha_celery.packs._model import NODE_PATTERN, DomainPack, PackCase
from hypha_celery.packs._paths import Problem, path, under
from hypha_celery.tools import DEFAULT_POLICY_ID

__all__ = ["Layout", "problems", "schema_problem"]

_NAME_CHARS = "letters, digits, _ and - (up to 64, not starting with a digit)"
_GLOB = frozenset("*?[")


@dataclass(frozen=True)
class Layout:
    """Where a partial pack's entries were in the document: ``positions`` (section ->
    the document index of each entry kept) and ``broken`` (section -> ids of entries left
    out for their own problems, which references may still name)."""

    positions: Mapping[str, Sequence[int]] = field(default_factory=dict)
    broken: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def at(self, section: str, i: int, *rest: str | int) -> str:
        kept = self.positions.get(section)
        return path(section, kept[i] if kept is not None else i, *rest)

    def known(self, section: str, ids: Iterable[str]) -> frozenset[str]:
        return frozenset(ids) | self.broken.get(section, frozenset())


def problems(pack: DomainPack, layout: Layout | None = None) -> list[Problem]:
    """Every problem of ``pack`` beyond its shape (which pydantic checked)."""
    layout = layout or Layout()
    refs = _Refs(pack, layout)
    return [*_schemas(pack), *_duplicates(pack, layout), *_nodes(pack, refs),
            *_profiles(pack, refs), *_workflows(pack, layout, refs),
            *refs.check("workflow", pack.default_workflow, "default_workflow"),
            *refs.check("policy", pack.default_policy, "default_policy"),
            *_sessions(pack, refs), *_cases(pack, layout, refs)]


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a JSON Schema (Draft 2020-12), or None."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        return f"not a valid JSON Schema{f' (at {where})' if where else ''}: {exc.message}"
    return None


class _Refs:
    """The ids each kind of reference may name."""

    def __init__(self, pack: DomainPack, layout: Layout) -> None:
        known = layout.known
        self.ids: dict[str, frozenset[str]] = {
            "task schema": known("task_schemas", pack.task_schemas),
            "output contract": known("output_contracts", pack.output_contracts),
            "tool": known("tools", (t.id for t in pack.tools)),
            "tool profile": known("tool_profiles", pack.tool_profiles),
            "policy": known("policies", (p.id for p in pack.policies)) | {DEFAULT_POLICY_ID},
            "workflow": known("workflows", (w.id for w in pack.workflows)),
            "node": known("nodes", pack.nodes),
        }

    def check(self, kind: str, value: str | None, where: str) -> list[Problem]:
        if value is None or value in self.ids[kind]:
            return []
        names = sorted(self.ids[kind])
        hint = ("known: " + ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
                if names else "none is declared")
        return [(where, f"unknown {kind} {value!r} ({hint})")]


def _schemas(pack: DomainPack) -> Iterator[Problem]:
    for section in ("task_schemas", "output_contracts"):
        for key, schema in getattr(pack, section).items():
            problem = schema_problem(schema)
            if problem is not None:
                yield path(section, key), problem


def _duplicates(pack: DomainPack, layout: Layout) -> Iterator[Problem]:
    for section in ("workflows", "tools", "policies", "evaluation_cases", "regression_cases"):
        seen: dict[str, int] = {}
        for i, entry in enumerate(getattr(pack, section)):
            if entry.id in seen:
                yield (layout.at(section, i, "id"), f"duplicate id {entry.id!r} (also "
                                                    f"{layout.at(section, seen[entry.id])})")
            seen.setdefault(entry.id, i)


def _nodes(pack: DomainPack, refs: _Refs) -> Iterator[Problem]:
    for name, node in pack.nodes.items():
        if not re.match(NODE_PATTERN, name):
            yield path("nodes", name), f"a node name is {_NAME_CHARS}"
        yield from refs.check("tool", node.tool, path("nodes", name, "tool"))


def _profiles(pack: DomainPack, refs: _Refs) -> Iterator[Problem]:
    for key, allowed in pack.tool_profiles.items():
        for i, tool in enumerate(allowed):
            if not _GLOB & set(tool):
                yield from refs.check("tool", tool, path("tool_profiles", key, i))


def _workflows(pack: DomainPack, layout: Layout, refs: _Refs) -> Iterator[Problem]:
    for i, wf in enumerate(pack.workflows):
        where = layout.at("workflows", i)
        if not re.match(NODE_PATTERN, wf.id):
            yield f"{where}.id", f"a workflow id names its graph: {_NAME_CHARS}"
        yield from under(where, workflow_problems(wf, refs.ids["node"]))
        for ref, kind in (("task_schema", "task schema"),
                          ("output_contract", "output contract"),
                          ("tool_profile", "tool profile"), ("policy", "policy")):
            yield from refs.check(kind, getattr(wf, ref), f"{where}.{ref}")
        for j, state in enumerate(wf.states):
            at = f"{where}.states[{j}]"
            for k, profile in enumerate(state.tool_profiles):
                yield from refs.check("tool profile", profile, f"{at}.tool_profiles[{k}]")
            for k, policy in enumerate(state.policies):
                yield from refs.check("policy", policy, f"{at}.policies[{k}]")
            if len(state.policies) > 1:
                yield f"{at}.policies", "a state binds one policy"
            for key in ("tools", "denied_tools"):
                for k, tool in enumerate(getattr(state, key) or ()):
                    if not _GLOB & set(tool):
                        yield from refs.check("tool", tool, f"{at}.{key}[{k}]")


def _sessions(pack: DomainPack, refs: _Refs) -> Iterator[Problem]:
    for key, profile in pack.session_profiles.items():
        for ref, kind in (("workflow", "workflow"), ("tool_profile", "tool profile"),
                          ("policy", "policy")):
            yield from refs.check(kind, getattr(profile, ref),
                                  path("session_profiles", key, ref))


def _cases(pack: DomainPack, layout: Layout, refs: _Refs) -> Iterator[Problem]:
    checks = set(get_args(RegressionCheck))
    for section in ("evaluation_cases", "regression_cases"):
        case: PackCase
        for i, case in enumerate(getattr(pack, section)):
            where = layout.at(section, i)
            yield from refs.check("workflow", case.workflow, f"{where}.workflow")
            yield from refs.check("output contract", case.output_contract,
                                  f"{where}.output_contract")
            for k, name in enumerate(case.checks):
                if name not in checks:
                    yield (f"{where}.checks[{k}]", f"unknown check {name!r} (known: "
                                                   f"{', '.join(sorted(checks))})")
            yield from _case_input(pack, case, f"{where}.input")
            if section == "evaluation_cases":
                for key in ("checks", "fixture"):
                    if getattr(case, key):
                        yield (f"{where}.{key}", f"{key} belongs to a regression case (an "
                                                 "evaluation case checks its output contract "
                                                 "and its trace)")


def _case_input(pack: DomainPack, case: PackCase, where: str) -> Iterator[Problem]:
    wf = next((w for w in pack.workflows if w.id == case.workflow), None)
    schema = pack.task_schemas.get(wf.task_schema) if wf and wf.task_schema else None
    if schema is None or schema_problem(schema) is not None:
        return
    for at, message in OutputContract("input", schema).issues(case.input):
        yield f"{where}{at[1:]}", message
