"""ToolRegistry: specs plus handlers, by id."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery.errors import ToolCallRejected, ToolSpecError
from hypha_celery.tools import GovernedRunner, ToolRegistry, ToolSpec

ECHO = ToolSpec(id="util.echo", input_schema={}, side_effect="none")


def test_register_and_resolve() -> None:
    tools = ToolRegistry()

    @tools.tool(ECHO)
    def echo(args: Any) -> Any:
        return args

    assert echo({"a": 1}) == {"a": 1}  # the decorator returns the function
    assert "util.echo" in tools and list(tools) == ["util.echo"] and len(tools) == 1
    assert tools.resolve("util.echo").handler is echo
    assert tools.specs() == [ECHO]


def test_an_unknown_tool_is_not_found() -> None:
    with pytest.raises(ToolCallRejected) as caught:
        ToolRegistry().resolve("nope")
    assert caught.value.code == "TOOL_NOT_FOUND"
    runner = GovernedRunner(ToolRegistry(), None, lambda type_, payload: None)
    with pytest.raises(ToolCallRejected, match="TOOL_NOT_FOUND"):
        runner.run("nope", {})


def test_registration_mistakes() -> None:
    tools = ToolRegistry()
    tools.register(ECHO, lambda a: a)
    with pytest.raises(ToolSpecError, match="already registered"):
        tools.register(ECHO, lambda a: a)
    with pytest.raises(ToolSpecError, match="must be callable"):
        ToolRegistry().register(ECHO, "not callable")  # type: ignore[arg-type]
    with pytest.raises(ToolSpecError, match="not a ToolSpec"):
        ToolRegistry().register({"id": "x"}, lambda a: a)  # type: ignore[arg-type]


def test_a_mapping_keyed_by_spec_id() -> None:
    assert "util.echo" in ToolRegistry.of({"util.echo": (ECHO, lambda a: a)})
    with pytest.raises(ToolSpecError, match="registered with spec 'util.echo'"):
        ToolRegistry.of({"util.other": (ECHO, lambda a: a)})
