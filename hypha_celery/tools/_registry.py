"""``ToolRegistry``: the tools a runner can call, each a spec plus its handler."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from hypha_celery.errors import ToolCallRejected, ToolSpecError
from hypha_celery.tools._spec import ToolSpec

__all__ = ["Handler", "Tool", "ToolRegistry"]

#: ``handler(input) -> output``: input and output are JSON.
Handler = Callable[[Any], Any]
H = TypeVar("H", bound=Handler)


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    handler: Handler


class ToolRegistry:
    """Tools by id::

        tools = ToolRegistry()

        @tools.tool(ToolSpec(id="fs.read", input_schema=..., side_effect="read"))
        def read(args): ...
    """

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    @classmethod
    def of(cls, tools: Mapping[str, tuple[ToolSpec, Handler]]) -> ToolRegistry:
        """A registry of ``{tool_id: (spec, handler)}`` (each key must be its spec's id)."""
        registry = cls()
        for tool_id, (spec, handler) in tools.items():
            if tool_id != spec.id:
                raise ToolSpecError(f"tool {tool_id!r} is registered with spec {spec.id!r}")
            registry.register(spec, handler)
        return registry

    def register(self, spec: ToolSpec, handler: Handler) -> None:
        if not isinstance(spec, ToolSpec):
            raise ToolSpecError(f"not a ToolSpec: {spec!r}")
        if not callable(handler):
            raise ToolSpecError(f"tool {spec.id!r}: the handler must be callable")
        if spec.id in self._tools:
            raise ToolSpecError(f"tool {spec.id!r} is already registered")
        self._tools[spec.id] = Tool(spec, handler)

    def tool(self, spec: ToolSpec) -> Callable[[H], H]:
        """Decorator form of :meth:`register`; returns the function unchanged."""
        def decorate(handler: H) -> H:
            self.register(spec, handler)
            return handler
        return decorate

    def resolve(self, tool_id: str) -> Tool:
        """The tool, or :class:`~hypha_celery.errors.ToolCallRejected` ``TOOL_NOT_FOUND``."""
        try:
            return self._tools[tool_id]
        except KeyError:
            raise ToolCallRejected("TOOL_NOT_FOUND", f"no tool {tool_id!r}") from None

    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self._tools.values()]

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._tools

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)
