"""A pack document in hypha's camelCase spelling, made from ours by walking the pack
models: every key that names a field of a pack model (at any depth) is written as its
camelCase alias; user keys (node names, schema names, JSON Schemas, constants) are not."""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel
from pydantic.alias_generators import to_camel

from hypha_celery.packs import DomainPack

__all__ = ["camel_doc", "models_of"]


def models_of(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``list[X]``, ``dict[str, X]``, ``X | None``,
    ``Annotated[X, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    if get_origin(annotation) in (list, dict, Union, types.UnionType) or get_args(annotation):
        for arg in get_args(annotation):
            found += models_of(arg)
    return found


def _alias(model: type[BaseModel], name: str, hypha: dict[str, str]) -> str:
    info = model.model_fields[name]
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return hypha.get(name) or to_camel(name)
    return alias if isinstance(alias, str) else name


def camel_doc(doc: Any, model: type[BaseModel] = DomainPack,
              hypha: dict[str, str] | None = None) -> Any:
    """``doc`` (valid for ``model``) with its field keys in camelCase; ``hypha`` picks an
    alias by field name where a field has several (``human_review`` ->
    ``humanReviewPolicy``)."""
    names = hypha or {}
    if not isinstance(doc, dict):
        return doc
    out: dict[str, Any] = {}
    for key, value in doc.items():
        field = key if key in model.model_fields else next(
            (n for n, i in model.model_fields.items() if i.alias == key), None)
        if field is None and "spec" in model.model_fields:  # a tool's flat spec fields
            (spec,) = models_of(model.model_fields["spec"].annotation)
            out[_alias(spec, key, names) if key in spec.model_fields else key] = value
            continue
        if field is None:
            out[key] = value
            continue
        inner = models_of(model.model_fields[field].annotation)
        out[_alias(model, field, names)] = _convert(value, inner, names)
    return out


def _convert(value: Any, inner: list[type[BaseModel]], names: dict[str, str]) -> Any:
    if not inner:
        return value
    if isinstance(value, list):
        return [_convert(v, inner, names) for v in value]
    if isinstance(value, dict) and not _is_entry(value, inner[0]):
        return {k: _convert(v, inner, names) for k, v in value.items()}
    return camel_doc(value, inner[0], names)


def _is_entry(value: dict[str, Any], model: type[BaseModel]) -> bool:
    """A mapping of ``model``'s fields, not a mapping of names to entries."""
    known = set(model.model_fields) | {i.alias for i in model.model_fields.values() if i.alias}
    return bool(value) and set(value) <= known | _flat_fields(model)


def _flat_fields(model: type[BaseModel]) -> set[str]:
    spec = model.model_fields.get("spec")
    if spec is None:
        return set()
    (inner,) = models_of(spec.annotation)
    return set(inner.model_fields)
