"""``parse_action``: a model's reply as a ReAct action (hypha's ``actionFromInferenceOutput``).

* ``{"action": "tool", "tool": id, "input": {...}}`` (``toolId`` is read too), or hypha's
  ``{"toolCalls": [{"toolId"|"tool"|"name": id, "input"|"arguments": {...}}, ...]}``
  (the first call): a tool call;
* ``{"action": "finish" | "model", "output": x}``: the answer ``x``;
* ``{"action": "human_review", "reason": text}``: park the run for a person;
* anything else: a finish whose output is the whole reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypedDict

from hypha_celery.jsontypes import JsonValue

__all__ = ["Action", "parse_action"]


class Action(TypedDict, total=False):
    action: Literal["tool", "finish", "human_review"]
    tool: str
    input: JsonValue
    output: JsonValue
    reason: str


def parse_action(reply: JsonValue) -> Action:
    """The action ``reply`` asks for (never raises: the unknown is a finish)."""
    if not isinstance(reply, Mapping):
        return {"action": "finish", "output": reply}
    kind = reply.get("action")
    if kind == "tool":
        return _tool(reply)
    if kind in ("finish", "model"):
        return {"action": "finish", "output": reply.get("output")}
    if kind == "human_review":
        return {"action": "human_review", "reason": str(reply.get("reason") or "")}
    calls = reply.get("toolCalls")
    if isinstance(calls, list) and calls and isinstance(calls[0], Mapping):
        return _tool(calls[0])
    return {"action": "finish", "output": dict(reply)}


def _tool(call: Mapping[str, JsonValue]) -> Action:
    """A tool action; a missing tool id is ``""`` (the policy check rejects it)."""
    tool = next((v for k in ("tool", "toolId", "name") if isinstance(v := call.get(k), str)),
                "")
    args: JsonValue = next((call[k] for k in ("input", "arguments") if call.get(k) is not None),
                     {})
    return {"action": "tool", "tool": tool, "input": args}
