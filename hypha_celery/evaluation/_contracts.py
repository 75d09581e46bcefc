"""Output contracts: a JSON Schema (Draft 2020-12, validated by ``jsonschema``) the run's
final output must satisfy."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from hypha_celery.evaluation._results import Check, EvaluationResult, result
from hypha_celery.replay._fixture import checked_schema

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class OutputContract:
    """``schema`` checked at construction (:class:`~hypha_celery.errors.InvalidContract`)."""

    id: str
    schema: Mapping[str, object]  # a JSON Schema (a JsonObject once checked)
    version: str | None = None
    _validator: Draft202012Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        schema = checked_schema(self.schema, f"output contract {self.id!r}")
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "_validator", Draft202012Validator(schema))

    def issues(self, output: Any) -> list[tuple[str, str]]:
        """``(path, message)`` for every way ``output`` breaks the schema, sorted by path."""
        found: dict[tuple[str, str], None] = {}
        for error in self._validator.iter_errors(output):
            for parts, message in _issues(error):
                found[(json_path(parts), message)] = None
        return sorted(found)


def json_path(parts: Iterable[str | int]) -> str:
    """``["a", 0, "b c"]`` -> ``$.a[0]["b c"]``."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


def _issues(error: ValidationError) -> Iterator[tuple[list[str | int], str]]:
    """One issue per missing / unexpected property (jsonschema reports those at the
    object), otherwise the error itself."""
    base: list[str | int] = list(error.absolute_path)
    instance, value = error.instance, error.validator_value
    if error.validator == "required" and isinstance(instance, dict) \
            and isinstance(value, list):
        for name in value:
            if name not in instance:
                yield [*base, name], f"{name!r} is a required property"
        return
    if error.validator == "additionalProperties" and value is False \
            and isinstance(instance, dict) and isinstance(error.schema, Mapping):
        known = set(error.schema.get("properties") or {})
        patterns = list(error.schema.get("patternProperties") or {})
        for name in instance:
            if name not in known and not any(re.search(p, name) for p in patterns):
                yield [*base, name], f"{name!r} is not allowed (additionalProperties is false)"
        return
    yield base, error.message


def as_contract(contract: OutputContract | Mapping[str, object], default_id: str = "output"
                ) -> OutputContract:
    return contract if isinstance(contract, OutputContract) else OutputContract(default_id,
                                                                                contract)


def validate_output(output: object, contract: OutputContract | Mapping[str, object], *,
                    run_id: str | None = None, evaluation_id: str | None = None
                    ) -> EvaluationResult:
    """Check ``output`` against ``contract`` (an :class:`OutputContract` or a bare schema,
    whose id is then ``output``). Passing: one check ``<contract id>:schema``; otherwise
    one failed check ``<contract id>:schema:<n>`` (n from 1) per issue, with its ``path``."""
    c = as_contract(contract)
    issues = c.issues(output)
    if not issues:
        checks = [Check(id=f"{c.id}:schema", passed=True,
                        message=f"the output satisfies contract {c.id}")]
    else:
        checks = [Check(id=f"{c.id}:schema:{n}", passed=False, message=f"{path}: {message}",
                        path=path) for n, (path, message) in enumerate(issues, 1)]
    return result(evaluation_id or f"{c.id}:output-contract", "output_contract", checks, run_id)
