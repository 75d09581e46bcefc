"""The provider-neutral shapes of one model call: :class:`LLMRequest` in, a stream of
:class:`~hypha_celery.backends.BackendEvent` and one :class:`LLMResult` out.

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
from typing import Annotated, Any, Literal, Required

from pydantic import BeforeValidator, PlainSerializer, SkipValidation, TypeAdapter
from typing_extensions import TypedDict  # pydantic reads it (python < 3.12)

from hypha_celery.jsontypes import JsonObject

__all__ = ["LLMRequest", "LLMResult", "Message", "Role", "ToolCall", "ToolCallJson",
           "ToolDecl", "Usage", "tool_decls"]

#: Who wrote a message (the neutral format's four roles).
Role = Literal["system", "user", "assistant", "tool"]


class ToolCallJson(TypedDict):
    """A tool call an assistant message carries (:meth:`ToolCall.to_json`)."""

    id: str
    name: str
    arguments: JsonObject


class Message(TypedDict, total=False):
    """One message in the neutral format (the module docstring's three shapes): its
    ``role`` and ``content`` (text; None or missing: none), an assistant's ``tool_calls``,
    a tool answer's ``tool_call_id``. A provider module refuses another role or content
    that is not text (``ValueError``) when it translates the message."""

    role: Required[Role]
    content: str | None
    tool_calls: list[ToolCallJson]
    tool_call_id: str


def _as_given(messages: tuple[Message, ...]) -> list[Message]:
    return list(messages)


def _count(value: object) -> object:
    """A token count as the provider reported it: null or missing is 0, 3.0 is 3."""
    if value is None:
        return 0
    return int(value) if isinstance(value, float) else value


def _text(value: object) -> object:
    return "" if value is None else value


def _no_calls(value: object) -> object:
    return () if value is None else value


def _no_usage(value: object) -> object:
    return {} if value is None else value


#: A token count (see :func:`_count`).
Count = Annotated[int, BeforeValidator(_count)]
#: Text a provider may leave null (read as empty).
Text = Annotated[str, BeforeValidator(_text)]


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
    parameters: JsonObject  # a JSON Schema

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

    def to_json(self) -> dict[str, object]:
        """``name``, ``description``, ``parameters``."""
        json: dict[str, object] = _DECL.dump_python(self, mode="json")
        return json


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

    input_tokens: Count = 0
    output_tokens: Count = 0
    cache_read_tokens: Count = 0
    cache_write_tokens: Count = 0

    def to_json(self) -> dict[str, int]:
        """All four counts."""
        json: dict[str, int] = _USAGE.dump_python(self, mode="json")
        return json

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Usage:
        """Counts as :meth:`to_json` or a provider wrote them (other keys ignored)."""
        return _USAGE.validate_python(doc)

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool the model asked for: the call's ``id``, the tool's ``name``, its arguments."""

    id: str
    name: str
    arguments: JsonObject

    def to_json(self) -> ToolCallJson:
        json: ToolCallJson = _CALL.dump_python(self, mode="json")
        return json


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One call: ``model`` is the provider's model name (not the ``provider:`` ref)."""

    model: str
    #: Written as given (every key: a recorded call's request hash is taken of them).
    messages: Annotated[tuple[Message, ...], SkipValidation,
                        PlainSerializer(_as_given, return_type=list[Any])]
    tools: tuple[ToolDecl, ...] = ()
    #: Provider options (``max_output_tokens``, ``temperature``, ``api`` ...): JSON.
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        """``model``, ``messages``, ``tools``, ``options``: what a recorded call's request
        hash is taken of."""
        json: dict[str, object] = _REQUEST.dump_python(self, mode="json")
        return json


@dataclass(frozen=True, slots=True)
class LLMResult:
    """A completed call. ``stop_reason`` is the provider's (``end_turn``, ``tool_use``,
    ``stop``, ``completed`` ...)."""

    text: Text
    tool_calls: Annotated[tuple[ToolCall, ...], BeforeValidator(_no_calls)] = ()
    usage: Annotated[Usage, BeforeValidator(_no_usage)] = field(default_factory=Usage)
    stop_reason: str | None = None
    model: Text = ""
    response_id: str | None = None

    def to_json(self) -> dict[str, object]:
        """Every field (a ``model.call.completed``'s output)."""
        json: dict[str, object] = _RESULT.dump_python(self, mode="json")
        return json

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> LLMResult:
        """The result :meth:`to_json` wrote (null text, model, calls and usage: empty)."""
        return _RESULT.validate_python(doc)


_DECL = TypeAdapter(ToolDecl)
_USAGE = TypeAdapter(Usage)
_CALL = TypeAdapter(ToolCall)
_REQUEST = TypeAdapter(LLMRequest)
_RESULT = TypeAdapter(LLMResult)
