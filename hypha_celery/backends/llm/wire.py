"""Small translations every provider module needs: tool names on the wire and tool
arguments as JSON text.

Tool ids are dotted (``fs.read_file``) but both APIs accept only ``[A-Za-z0-9_-]{1,64}``
as a function name, so each request maps its tools to wire names (every other character
becomes ``_``) and maps the names the model answers with back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from hypha_celery.backends.llm.types import Message, ToolDecl

__all__ = ["ToolNames", "check_options", "check_tool", "dumps", "parse_arguments", "text",
           "wire_name"]

_NOT_WIRE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64


def wire_name(name: str) -> str:
    return _NOT_WIRE.sub("_", name)[:_MAX_NAME]


def check_tool(decl: ToolDecl) -> None:
    """Raise ``ValueError`` for a tool both APIs would refuse: no name, a name two tools
    share on the wire, or parameters that are not an object schema."""
    if not isinstance(decl.name, str) or not decl.name:
        raise ValueError("a tool needs a name")
    if not isinstance(decl.description, str):
        raise ValueError(f"tool {decl.name!r}: description must be a string")
    params = decl.parameters
    if not isinstance(params, dict) or params.get("type") != "object":
        raise ValueError(f"tool {decl.name!r}: parameters must be a JSON Schema with "
                         '"type": "object"')


class ToolNames:
    """The wire names of one request's tools, both ways."""

    def __init__(self, tools: Iterable[ToolDecl]) -> None:
        self._to_name: dict[str, str] = {}
        for decl in tools:
            check_tool(decl)
            wire = wire_name(decl.name)
            if self._to_name.setdefault(wire, decl.name) != decl.name:
                raise ValueError(f"tools {self._to_name[wire]!r} and {decl.name!r} have the "
                                 f"same wire name {wire!r}")

    def wire(self, name: str) -> str:
        return wire_name(name)

    def name(self, wire: str) -> str:
        """The declared name for ``wire`` (``wire`` itself when no tool has it)."""
        return self._to_name.get(wire, wire)


def parse_arguments(text: str) -> dict[str, Any]:
    """Tool-call arguments streamed as JSON text; ``ValueError`` unless an object."""
    if not text.strip():
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("tool arguments are not a JSON object")
    return value


def dumps(value: Any) -> str:
    """Compact JSON text (tool arguments sent back to a provider)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def text(message: Message) -> str:
    """A neutral message's ``content``: text (None and a missing one are empty)."""
    content = message.get("content")
    if content is None:
        return ""
    if not isinstance(content, str):
        raise ValueError(f"a {message.get('role')!r} message's content must be text")
    return content


def check_options(options: dict[str, Any], known: frozenset[str]) -> None:
    """``ValueError`` naming the first option a provider does not understand."""
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown model option {unknown[0]!r} (known: {sorted(known)})")
