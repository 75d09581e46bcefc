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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolDecl:
    """A function tool offered to the model: its name, description and JSON Schema.

    Everywhere a model call takes tools (``ctx.llm``, ``LLMClient``, the hosted agent
    backends' ``tools`` option) each may be given as a ``ToolDecl``, its JSON (``name``,
    ``description``, ``parameters``), a :class:`~hypha_celery.tools.ToolSpec`, or a
    ``ToolSpec``'s JSON (``id``, ``description``, ``input_schema``; other keys, such as
    ``side_effect``, are ignored: a model call runs nothing). See :func:`tool_decls`.
    """

    name: str
    description: str
    parameters: dict[str, Any]

    @classmethod
    def of(cls, spec: Any) -> ToolDecl:
        """One tool in any accepted form (see the class docstring). ``ValueError`` for
        JSON without a name or a schema, ``TypeError`` for anything else."""
        if isinstance(spec, ToolDecl):
            return spec
        if isinstance(spec, Mapping):
            return cls._of_json(spec)
        ident, schema = getattr(spec, "id", None), getattr(spec, "input_schema", None)
        if isinstance(ident, str) and isinstance(schema, Mapping):  # a ToolSpec
            return cls(ident, _description(getattr(spec, "description", None)), dict(schema))
        raise TypeError(f"a tool is a ToolSpec, a ToolDecl or their JSON, not a "
                        f"{type(spec).__name__}")

    @classmethod
    def _of_json(cls, doc: Mapping[str, Any]) -> ToolDecl:
        field_ = "parameters" if "name" in doc and "id" not in doc else "input_schema"
        name = doc.get("name" if field_ == "parameters" else "id")
        if not isinstance(name, str) or not name:
            raise ValueError("a tool's JSON needs an 'id' (a ToolSpec's) or a 'name' "
                             "(a ToolDecl's)")
        schema = doc.get(field_)
        if not isinstance(schema, Mapping):
            raise ValueError(f"tool {name!r} needs {field_!r}: its JSON Schema, an object")
        return cls(name, _description(doc.get("description")), dict(schema))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "parameters": self.parameters}


def _description(value: Any) -> Any:
    return "" if value is None else value  # a description that is not text is refused later


def tool_decls(tools: Iterable[Any] | None) -> tuple[ToolDecl, ...]:
    """A call's tools: each in any form :class:`ToolDecl` accepts; ``None`` (or an empty
    list) for none. ``TypeError`` / ``ValueError`` name what is wrong."""
    if tools is None:
        return ()
    if isinstance(tools, Mapping | str | bytes) or not isinstance(tools, Iterable):
        raise TypeError(f"tools is a list of ToolSpec, ToolDecl or their JSON (or None), "
                        f"not a {type(tools).__name__}")
    return tuple(ToolDecl.of(t) for t in tools)


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
