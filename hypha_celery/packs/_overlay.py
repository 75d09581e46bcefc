"""Overlays (hypha's ``extendDomainPack``): a partial pack document applied to a base.

In each list section (``workflows``, ``tools``, ``policies``, ``evaluation_cases``,
``regression_cases``) an overlay entry replaces the base entry with its ``id`` (in place)
or is appended; ``{id: X, remove: true}`` removes it. In each mapping section
(``task_schemas``, ``output_contracts``, ``nodes``, ``tool_profiles``,
``session_profiles``) a key replaces the base's or is added; ``X: {remove: true}`` removes
it. Any other field (``id``, ``version``, ``name``, ``default_workflow``, ...) replaces the
base's. The result is validated as a whole. A section may be spelled as hypha does
(``evaluationCases``, ``toolProfiles``): it merges the same way.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import AliasChoices

from hypha_celery.errors import PackError
from hypha_celery.packs._model import DomainPack
from hypha_celery.packs._parse import parse_pack
from hypha_celery.packs._paths import Problem, path

__all__ = ["LIST_SECTIONS", "MAP_SECTIONS", "merge", "overlay"]

LIST_SECTIONS = ("workflows", "tools", "policies", "evaluation_cases", "regression_cases")
MAP_SECTIONS = ("task_schemas", "output_contracts", "nodes", "tool_profiles",
                "session_profiles", "mcp_profiles")
_REMOVE = {"remove": True}
def _spellings(field: str) -> list[str]:
    info = DomainPack.model_fields[field]
    alias = info.validation_alias
    names = alias.choices if isinstance(alias, AliasChoices) else [alias]
    return list(dict.fromkeys([field, *(n for n in names if isinstance(n, str))]))


#: Every spelling of a pack field -> its name (``defaultWorkflow`` -> ``default_workflow``).
_FIELD = {spelling: field for field in DomainPack.model_fields
          for spelling in _spellings(field)}


def overlay(base: DomainPack, overlay_doc: Mapping[str, object]) -> DomainPack:
    """``base`` with ``overlay_doc`` applied; :class:`PackError` lists every problem of
        the overlay and of the resulting pack. The overlay's top-level keys may be spelled as
    hypha does (``evaluationCases``)."""
    if not isinstance(overlay_doc, Mapping):
        raise PackError([("", "an overlay is a mapping of pack fields")])
    ours = {_FIELD.get(k, k): v for k, v in overlay_doc.items()}  # base.to_doc(): ours
    merged, problems = merge(base.to_doc(), ours)
    return parse_pack(merged, problems, base_dir=base._base_dir)


def merge(base: Mapping[str, object], overlay_doc: Mapping[str, object]
          ) -> tuple[dict[str, object], list[Problem]]:
    """The merged document and the overlay's own problems (removing what is not there,
    a section of the wrong type); neither input is changed."""
    if not isinstance(overlay_doc, Mapping):
        raise PackError([("", "an overlay is a mapping of pack fields")])
    out = copy.deepcopy(dict(base))
    problems: list[Problem] = []
    for key, value in overlay_doc.items():
        value = copy.deepcopy(value)
        current = out.get(key)
        section = _FIELD.get(key, key)
        if section in LIST_SECTIONS and isinstance(value, list) \
                and isinstance(current, list | None):
            out[key] = _merge_list(key, current or [], value, problems)
        elif section in MAP_SECTIONS and isinstance(value, dict) \
                and isinstance(current, dict | None):
            out[key] = _merge_map(key, current or {}, value, problems)
        else:
            out[key] = value
    return out, problems


def _merge_list(section: str, base: list[Any], entries: list[Any],
                problems: list[Problem]) -> list[Any]:
    out = list(base)
    for i, entry in enumerate(entries):
        entry_id = entry.get("id") if isinstance(entry, dict) else None
        at = next((j for j, e in enumerate(out)
                   if entry_id is not None and isinstance(e, dict) and e.get("id") == entry_id),
                  None)
        if isinstance(entry, dict) and entry.pop("remove", False) is True:
            if at is None:
                problems.append((path(section, i), f"cannot remove {entry_id!r}: the base "
                                                   f"has no {section} entry with that id"))
            else:
                del out[at]
        elif at is None:
            out.append(entry)
        else:
            out[at] = entry
    return out


def _merge_map(section: str, base: dict[str, object], entries: dict[str, object],
               problems: list[Problem]) -> dict[str, object]:
    out = dict(base)
    for key, value in entries.items():
        if value == _REMOVE:
            if key not in out:
                problems.append((path(section, key), f"cannot remove {key!r}: the base has "
                                                     f"no such {section} entry"))
            out.pop(key, None)
        else:
            out[key] = value
    return out
