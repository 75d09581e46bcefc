"""The tool-execution seam: what a model backend calls to run the tools its model asks
for, so agents' tool calls are governed like a node's.

A backend holds no tool: it is bound (:meth:`Backend.bind`) with
:class:`~hypha_celery.backends.llm.client.BackendServices` whose ``tools`` is a
:class:`ToolExecutor` — :class:`hypha_celery.tools.GovernedRunner` implements it (scope,
policy, review, input and output schemas, at-most-once results per call id, local and MCP
tools alike). A hosted-model backend started with ``run_tools=True`` then answers its
model's tool calls itself within the turn (at most ``max_tool_rounds`` rounds, default
:data:`DEFAULT_TOOL_ROUNDS`, never more than :data:`MAX_TOOL_ROUNDS`), instead of ending
the turn with ``tool_calls`` for the application to answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hypha_celery.jsontypes import JsonValue

__all__ = ["DEFAULT_TOOL_ROUNDS", "MAX_TOOL_ROUNDS", "ToolAnswer", "ToolExecutor",
           "ToolRequest"]

#: Model -> tools -> model rounds one turn runs by default, and at most.
DEFAULT_TOOL_ROUNDS = 8
MAX_TOOL_ROUNDS = 32


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """One tool call a model asked for: its call id (the invocation id: a call is run at
    most once), the tool's id and its input (JSON)."""

    call_id: str
    tool: str
    input: JsonValue


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """What the model is told: ``status`` (``completed``, ``denied``, ``failed``,
    ``human_review_required`` ...), the output (JSON) of a completed call, else a short
    ``message`` (a code and reason, never a stack trace)."""

    call_id: str
    status: str
    output: JsonValue = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    def content(self) -> JsonValue:
        """The tool message's content: the output, or the refusal as data."""
        if self.ok:
            return self.output
        return {"status": self.status, "message": self.message}


class ToolExecutor(Protocol):
    """Runs one tool call and answers it; never raises for a refused or failed call
    (that is an answer), only for a bug."""

    def execute(self, request: ToolRequest) -> ToolAnswer: ...
