"""The base of the declarative tool models: strict, frozen, and failing as
:class:`~hypha_celery.errors.ToolSpecError` (naming the field) instead of pydantic's
``ValidationError``, both from the constructor and from ``model_validate``."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from hypha_celery.errors import ToolSpecError


class SpecModel(BaseModel):
    """``extra="forbid"``, frozen; every validation error becomes a ``ToolSpecError``
    whose message is ``<what> <id>: <field>: <problem>``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: How the message names the model ("tool spec", "policy rule", ...).
    _kind: ClassVar[str] = "spec"

    @model_validator(mode="wrap")
    @classmethod
    def _as_spec_error(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        try:
            return handler(data)
        except ValidationError as exc:
            raise ToolSpecError(_message(cls._kind, data, exc.errors())) from None


def _message(what: str, data: Any, errors: list[ErrorDetails]) -> str:
    name = data.get("id") if isinstance(data, dict) else None
    subject = f"{what} {name!r}" if isinstance(name, str) else what
    return f"{subject}: " + "; ".join(_problem(e) for e in errors)


def _problem(error: ErrorDetails) -> str:
    where = ".".join(str(p) for p in error["loc"])
    ctx = error.get("ctx") or {}
    message = str(ctx["error"]) if error["type"] == "value_error" and "error" in ctx \
        else error["msg"]
    return f"{where}: {message}" if where else message
