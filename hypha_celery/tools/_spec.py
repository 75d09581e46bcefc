"""``ToolSpec``: the declarative contract of one governed tool (hypha's ``ToolSpec``)."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator

from hypha_celery.evaluation._contracts import OutputContract
from hypha_celery.graph.model import SIDE_EFFECTS, SideEffect
from hypha_celery.jsontypes import JsonObject
from hypha_celery.replay._fixture import checked_schema
from hypha_celery.tools._model import SpecModel

__all__ = ["KEYED_LEVELS", "SIDE_EFFECTS", "SideEffect", "ToolSource", "ToolSpec"]

ToolSource = Literal["local", "mcp", "http", "plugin"]
#: Levels whose calls need an idempotency key unless the spec says otherwise.
KEYED_LEVELS: frozenset[str] = frozenset({"write", "external_effect", "irreversible"})
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")


class ToolSpec(SpecModel):
    """One tool: what it takes, what it returns, what it may change.

    ``input_schema`` / ``output_schema`` are JSON Schemas (Draft 2020-12), checked here.
    ``human_review`` is hypha's ``humanApprovalPolicy.required``; a review not decided
    within ``review_expires_in`` seconds expires. ``idempotency_key_required`` defaults
    to true for ``write``, ``external_effect`` and ``irreversible``. Anything invalid
    raises :class:`~hypha_celery.errors.ToolSpecError` naming the field.
    """

    _kind: ClassVar[str] = "tool spec"

    id: str
    description: str = ""
    input_schema: JsonObject
    output_schema: JsonObject | None = None
    side_effect: SideEffect
    source: ToolSource = "local"
    human_review: bool = False
    review_expires_in: float | None = Field(default=None, gt=0)
    #: Left out (None): true from ``write`` up.
    idempotency_key_required: bool = Field(default=None, validate_default=True)

    _input: OutputContract = PrivateAttr()
    _output: OutputContract | None = PrivateAttr(default=None)

    @field_validator("idempotency_key_required", mode="before")
    @classmethod
    def _key_by_level(cls, value: Any, info: ValidationInfo) -> Any:
        return info.data.get("side_effect") in KEYED_LEVELS if value is None else value

    @field_validator("id")
    @classmethod
    def _dotted(cls, value: str) -> str:
        if not _DOTTED.match(value):
            raise ValueError(f"{value!r} is not a dotted name (like 'fs.read_file')")
        return value

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _json_schema(cls, schema: JsonObject | None) -> JsonObject | None:
        # InvalidContract is a ValueError: pydantic reports it under the field's name
        return None if schema is None else checked_schema(schema, "the schema")

    def model_post_init(self, context: Any, /) -> None:
        self._input = OutputContract(f"{self.id}:input", self.input_schema)
        if self.output_schema is not None:
            self._output = OutputContract(f"{self.id}:output", self.output_schema)

    def input_issues(self, value: Any) -> list[tuple[str, str]]:
        """``(path, message)`` for every way ``value`` breaks ``input_schema``
        (paths like ``$.query``), sorted by path; empty when it conforms."""
        return self._input.issues(value)

    def output_issues(self, value: Any) -> list[tuple[str, str]]:
        """As :meth:`input_issues`, against ``output_schema`` (none: always empty)."""
        return self._output.issues(value) if self._output is not None else []
