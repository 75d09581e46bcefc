"""``ToolResult``: what a governed call gives back (and what is stored under its
invocation id once the handler ran)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hypha_celery.errors import ToolCallRejected

__all__ = ["Phase", "ToolResult", "ToolStatus"]

#: hypha's result statuses.
ToolStatus = Literal["completed", "failed", "denied", "human_review_required", "cancelled",
                     "conflict"]
#: The step of :class:`~hypha_celery.tools.runner.GovernedRunner` that stopped the call.
Phase = Literal["scope", "idempotency", "input", "policy", "approval", "execute", "output"]


@dataclass(frozen=True)
class ToolResult:
    """``output`` when ``completed``; otherwise ``code`` (``TOOL_*``), ``message`` and
    the ``phase`` that stopped the call. ``issues`` are ``(path, message)`` schema
    issues, ``error`` the handler's exception (``type``, ``message``, ``class``).
    ``reused``: served from the result stored under the invocation id."""

    status: ToolStatus
    tool: str
    call_id: str
    output: Any = None
    code: str | None = None
    message: str = ""
    phase: Phase | None = None
    review_id: str | None = None
    input_hash: str | None = None
    issues: tuple[tuple[str, str], ...] = ()
    error: dict[str, str] | None = None
    reused: bool = field(default=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    def raise_for_status(self) -> ToolResult:
        """``self`` when completed, else :class:`~hypha_celery.errors.ToolCallRejected`."""
        if not self.ok:
            raise ToolCallRejected(self.code or self.status.upper(), self.message)
        return self

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (``reused`` left out: it describes a delivery, not the call)."""
        return {
            "status": self.status, "tool": self.tool, "call_id": self.call_id,
            "output": self.output, "code": self.code, "message": self.message,
            "phase": self.phase, "review_id": self.review_id, "input_hash": self.input_hash,
            "issues": [{"path": path, "message": message} for path, message in self.issues],
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, reused: bool = False) -> ToolResult:
        issues = tuple((str(i["path"]), str(i["message"])) for i in data.get("issues") or ())
        return cls(status=data["status"], tool=data["tool"], call_id=data["call_id"],
                   output=data.get("output"), code=data.get("code"),
                   message=data.get("message", ""), phase=data.get("phase"),
                   review_id=data.get("review_id"), input_hash=data.get("input_hash"),
                   issues=issues, error=data.get("error"), reused=reused)
