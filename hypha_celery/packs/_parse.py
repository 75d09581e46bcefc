"""A pack document (already read: YAML / JSON) to a :class:`DomainPack`, or one
:class:`PackError` with every problem: its shape (pydantic), the values that are not
JSON, then every reference (:func:`~hypha_celery.packs.problems`).

The references are checked even when the shape is broken: the entries that failed are
left out of a partial pack (and references to them are not reported again), so a broken
tool spec and an unknown node in a workflow come out together.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, ValidationError
from pydantic_core import ErrorDetails

from hypha_celery.errors import PackError
from hypha_celery.packs._check import Layout, problems
from hypha_celery.packs._model import DomainPack, PackWorkflow
from hypha_celery.packs._paths import Problem, path
from hypha_celery.packs._skills import load_skills, skill_binding_problems

__all__ = ["MAX_DOC_DEPTH", "MAX_DOC_VALUES", "parse_pack"]

#: The most values a pack document may hold, counted as they are read: a YAML alias
#: counts its values each time it is used (a few hundred bytes of nested aliases would
#: otherwise expand to millions).
MAX_DOC_VALUES = 100_000
#: The deepest nesting of mappings and lists a pack document may have.
MAX_DOC_DEPTH = 100


class _Partial(DomainPack):
    """What is left of a broken pack: every field may be missing."""

    id: str = "invalid"
    version: str = "0"
    name: str = "invalid"
    workflows: list[PackWorkflow] = []


def parse_pack(doc: Any, found: Sequence[Problem] = (), *,
               base_dir: str | os.PathLike[str] | None = None) -> DomainPack:
    """Validate ``doc``; ``found``: problems already known (an overlay's) to report with
    the others; ``base_dir``: where the pack's ``skills`` directories are (the pack
    file's directory; default the working directory). Raises :class:`PackError` unless
    there is no problem at all."""
    if not isinstance(doc, Mapping):
        raise PackError([*found, ("", "a pack is a mapping (id, version, name, workflows, "
                                      f"...), not {type(doc).__name__}")])
    too_big = _too_big(doc)
    if too_big:
        raise PackError([*found, ("", too_big)])
    out = [*found, *_not_json(doc, ())]
    try:
        pack: DomainPack = DomainPack.model_validate(doc)
        layout = Layout()
    except ValidationError as exc:
        errors = exc.errors()
        out += [_problem(e) for e in errors]
        partial, layout = _salvage(dict(doc), errors)
        if partial is None:
            raise PackError(out) from None
        pack = partial
    out += problems(pack, layout)
    registry, skill_problems = load_skills(pack, None if base_dir is None else Path(base_dir))
    out += [*skill_problems, *skill_binding_problems(pack, registry)]
    if out:
        raise PackError(out)
    if registry is not None:  # only a pack with skills knows where it was loaded from
        pack._skill_registry = registry
        pack._base_dir = None if base_dir is None else Path(base_dir)
    return pack


def _too_big(doc: Any) -> str | None:
    """Why ``doc`` is past :data:`MAX_DOC_VALUES` or :data:`MAX_DOC_DEPTH`, or None
    (walked without recursion, at most ``MAX_DOC_VALUES`` steps)."""
    todo: list[tuple[Any, int]] = [(doc, 1)]
    for _ in range(MAX_DOC_VALUES):
        if not todo:
            return None
        value, depth = todo.pop()
        if depth > MAX_DOC_DEPTH:
            return f"the document is nested deeper than {MAX_DOC_DEPTH} levels"
        if isinstance(value, Mapping):
            todo += [(item, depth + 1) for item in value.values()]
        elif isinstance(value, list | tuple):
            todo += [(item, depth + 1) for item in value]
    if not todo:
        return None
    return (f"the document holds more than {MAX_DOC_VALUES} values (a YAML alias counts "
            "each time it is used)")


def _problem(error: ErrorDetails) -> Problem:
    loc = list(error["loc"])
    if len(loc) >= 3 and loc[0] == "tools" and loc[2] == "spec":
        del loc[2]  # the tool's own fields are flat in the document
    if error["type"] == "extra_forbidden":
        message = "unknown field"
    elif error["type"] == "value_error" and "error" in (error.get("ctx") or {}):
        message = str(error["ctx"]["error"])
    else:
        message = error["msg"]
    return path(*loc), message


def _salvage(doc: dict[str, object], errors: Sequence[ErrorDetails]
             ) -> tuple[DomainPack | None, Layout]:
    """A partial pack without the entries that failed, and where the kept ones were."""
    drop: dict[str, set[Any]] = {}
    for error in errors:
        loc = error["loc"]
        if not loc:  # the whole document (e.g. mixed spellings): nothing to salvage
            return None, Layout()
        key = _doc_key(doc, str(loc[0]))
        if len(loc) == 1 or not isinstance(doc.get(key), list | dict):
            doc.pop(key, None)
        else:
            drop.setdefault(str(loc[0]), set()).add(loc[1])
    positions: dict[str, list[int]] = {}
    broken: dict[str, set[str]] = {}
    for section, bad in drop.items():
        key = _doc_key(doc, section)
        entries = doc.get(key)
        if isinstance(entries, list):
            positions[section] = [i for i in range(len(entries)) if i not in bad]
            broken[section] = {e["id"] for i, e in enumerate(entries) if i in bad
                               and isinstance(e, dict) and isinstance(e.get("id"), str)}
            doc[key] = [entries[i] for i in positions[section]]
        elif isinstance(entries, dict):
            broken[section] = {str(k) for k in bad}
            doc[key] = {k: v for k, v in entries.items() if k not in bad}
    try:
        partial = _Partial.model_validate(doc)
    except ValidationError:
        return None, Layout()
    return partial, Layout(positions, {k: frozenset(v) for k, v in broken.items()})


def _doc_key(doc: Mapping[str, object], field: str) -> str:
    """The key of ``doc`` holding the pack field ``field`` (hypha's camelCase spelling, or
    any of a field's other names, when the document uses it)."""
    if field in doc:
        return field
    info = DomainPack.model_fields.get(field)
    alias = info.validation_alias if info is not None else None
    names = alias.choices if isinstance(alias, AliasChoices) else [alias]
    return next((n for n in names if isinstance(n, str) and n in doc), field)


def _not_json(value: Any, at: tuple[str | int, ...]) -> Iterator[Problem]:
    """Values YAML reads that JSON has no word for (dates, binary, sets, NaN, ...)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                yield path(*at), f"key {key!r} is not a string"
            else:
                yield from _not_json(item, (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _not_json(item, (*at, i))
    elif isinstance(value, float) and not math.isfinite(value):
        yield path(*at), f"{value} is not a JSON number"
    elif not isinstance(value, str | int | float | bool | type(None)):
        yield path(*at), f"a {type(value).__name__} is not JSON (quote it)"
