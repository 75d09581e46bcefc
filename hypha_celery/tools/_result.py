"""``ToolResult``: what a governed call gives back (and what is stored under its
invocation id once the handler ran)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, PlainSerializer, TypeAdapter
from typing_extensions import TypedDict  # pydantic reads it (python < 3.12)

from hypha_celery.errors import ToolCallRejected
from hypha_celery.jsontypes import JsonValue

__all__ = ["Phase", "SchemaIssueJson", "ToolResult", "ToolResultJson", "ToolStatus"]

#: hypha's result statuses.
ToolStatus = Literal["completed", "failed", "denied", "human_review_required", "cancelled",
                     "conflict"]
#: The step of :class:`~hypha_celery.tools.GovernedRunner` that stopped the call.
Phase = Literal["scope", "idempotency", "input", "policy", "approval", "execute", "output"]


class SchemaIssueJson(TypedDict):
    """One ``(path, message)`` schema issue as stored."""

    path: str
    message: str


class ToolResultJson(TypedDict):
    """A :class:`ToolResult` as stored under its invocation id (:meth:`ToolResult.to_json`)."""

    status: ToolStatus
    tool: str
    call_id: str
    output: JsonValue
    code: str | None
    message: str
    phase: Phase | None
    review_id: str | None
    input_hash: str | None
    issues: list[SchemaIssueJson]
    error: dict[str, str] | None


def _issues_in(value: object) -> object:
    """Stored issues (``[{"path", "message"}]``, or null) as ``(path, message)`` pairs."""
    if value is None:
        return ()
    if isinstance(value, list):
        return [(i.get("path"), i.get("message")) if isinstance(i, dict) else i for i in value]
    return value


def _issues_out(issues: tuple[tuple[str, str], ...]) -> list[SchemaIssueJson]:
    return [{"path": path, "message": message} for path, message in issues]


#: ``(path, message)`` pairs, stored as ``[{"path", "message"}]``.
Issues = Annotated[tuple[tuple[str, str], ...], BeforeValidator(_issues_in),
                   PlainSerializer(_issues_out)]


@dataclass(frozen=True)
class ToolResult:
    """``output`` when ``completed``; otherwise ``code`` (``TOOL_*``), ``message`` and
    the ``phase`` that stopped the call. ``issues`` are ``(path, message)`` schema
    issues, ``error`` the handler's exception (``type``, ``message``, ``class``).
    ``reused``: served from the result stored under the invocation id."""

    status: ToolStatus
    tool: str
    call_id: str
    output: JsonValue = None
    code: str | None = None
    message: str = ""
    phase: Phase | None = None
    review_id: str | None = None
    input_hash: str | None = None
    issues: Issues = ()
    error: dict[str, str] | None = None
    reused: Annotated[bool, Field(exclude=True)] = field(default=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    def raise_for_status(self) -> ToolResult:
        """``self`` when completed, else :class:`~hypha_celery.errors.ToolCallRejected`."""
        if not self.ok:
            raise ToolCallRejected(self.code or self.status.upper(), self.message)
        return self

    def to_json(self) -> ToolResultJson:
        """Plain JSON (``reused`` left out: it describes a delivery, not the call)."""
        json: ToolResultJson = _ADAPTER.dump_python(self, mode="json")
        return json

    @classmethod
    def from_json(cls, data: Mapping[str, object], *, reused: bool = False) -> ToolResult:
        """The result :meth:`to_json` gave (``ValidationError`` for anything else)."""
        return _ADAPTER.validate_python({**data, "reused": reused})


_ADAPTER = TypeAdapter(ToolResult)
