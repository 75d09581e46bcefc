"""The provider-neutral shapes of one model call: :class:`LLMRequest` in, a stream of
:class:`~hypha_celery.backends.Event` and one :class:`LLMResult` out.

Messages are plain JSON in one neutral format that every provider module translates:

* ``{"role": "system" | "user" | "assistant", "content": "text"}``;
* an assistant turn that called tools: ``{"role": "assistant", "content": "",
  "tool_calls": [{"id", "name", "arguments": {...}}]}``;
* a tool's answer: ``{"role": "tool", "tool_call_id": "...", "content": "text"}``.

Nothing here holds a key: keys are resolved at call time (:mod:`.keys`) and never stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolDecl:
    """A function tool offered to the model: its name, description and JSON Schema."""

    name: str
    description: str
    parameters: dict[str, Any]

    @classmethod
    def of(cls, spec: Any) -> ToolDecl:
        """From a :class:`~hypha_celery.tools.ToolSpec` (duck-typed: ``id``,
        ``description``, ``input_schema``) or a ``ToolDecl``."""
        if isinstance(spec, ToolDecl):
            return spec
        return cls(spec.id, spec.description, dict(spec.input_schema))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "parameters": self.parameters}


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one call (cache tokens where the provider reports them)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Usage:
        return cls(**{k: int(doc.get(k) or 0) for k in cls.__slots__})

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One call: ``model`` is the provider's model name (not the ``provider:`` ref)."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolDecl, ...] = ()
    #: Provider options (``max_output_tokens``, ``temperature``, ``api`` ...): JSON.
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "messages": list(self.messages),
                "tools": [t.to_json() for t in self.tools], "options": self.options}


@dataclass(frozen=True, slots=True)
class LLMResult:
    """A completed call. ``stop_reason`` is the provider's (``end_turn``, ``tool_use``,
    ``stop``, ``completed`` ...)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    model: str = ""
    response_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "tool_calls": [c.to_json() for c in self.tool_calls],
                "usage": self.usage.to_json(), "stop_reason": self.stop_reason,
                "model": self.model, "response_id": self.response_id}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LLMResult:
        calls = tuple(ToolCall(c["id"], c["name"], c["arguments"])
                      for c in doc.get("tool_calls") or ())
        return cls(doc.get("text") or "", calls, Usage.from_json(doc.get("usage") or {}),
                   doc.get("stop_reason"), doc.get("model") or "", doc.get("response_id"))
