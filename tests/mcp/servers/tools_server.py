"""A real MCP server for the gateway's tests, written with the same SDK (``mcp`` 1.x).

    python tools_server.py stdio
    python tools_server.py http PORT          (streamable HTTP on 127.0.0.1:PORT/mcp)

Its tool list is read from ``MCP_TEST_STATE`` (a file holding ``v1`` or ``v2``; absent:
``v1``) on every ``tools/list``, so a test changes the server's tools between two
discoveries of one process. ``v2`` changes ``forecast``'s input schema and adds a tool
whose input schema is malformed.

Tools: ``echo`` (read-only), ``forecast`` (read-only; drifts), ``slow`` (sleeps
``seconds``), ``crash`` (read-only: the process exits mid-call), ``crash_write`` (an
additive write: exits mid-call), ``bad_output`` (answers against its own output
schema), ``undeclared`` (no annotations), ``note`` (``_meta`` says ``read``), ``fail``
(answers ``isError``), ``big`` (a result of ``size`` bytes), ``change`` (switches to
``v2`` and sends ``notifications/tools/list_changed``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from mcp import types
from mcp.server.fastmcp import FastMCP

READ = types.ToolAnnotations(readOnlyHint=True)
WRITE = types.ToolAnnotations(readOnlyHint=False, destructiveHint=False)
TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
ANY: dict[str, Any] = {"type": "object"}


def variant() -> str:
    path = os.environ.get("MCP_TEST_STATE")
    if path and os.path.exists(path):
        with open(path) as f:
            return f.read().strip() or "v1"
    return "v1"


def tools() -> list[types.Tool]:
    city: dict[str, Any] = {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}
    if variant() == "v2":
        city = {**city, "properties": {**city["properties"], "days": {"type": "integer"}}}
    found = [
        types.Tool(name="echo", description="Echo the text.", inputSchema=TEXT,
                   outputSchema=TEXT, annotations=READ),
        types.Tool(name="forecast", description="The weather in a city.", inputSchema=city,
                   annotations=READ),
        types.Tool(name="slow", description="Sleep.", annotations=READ,
                   inputSchema={"type": "object",
                                "properties": {"seconds": {"type": "number"}}}),
        types.Tool(name="crash", description="Exit mid-call.", inputSchema=ANY,
                   annotations=READ),
        types.Tool(name="crash_write", description="Exit mid-call.", inputSchema=ANY,
                   annotations=WRITE),
        types.Tool(name="bad_output", description="Breaks its output schema.",
                   inputSchema=ANY, annotations=READ,
                   outputSchema={"type": "object", "required": ["n"],
                                 "properties": {"n": {"type": "integer"}}}),
        types.Tool(name="undeclared", description="Says nothing.", inputSchema=ANY),
        types.Tool(name="note", description="Declared read through _meta.", inputSchema=ANY,
                   _meta={"hypha/side_effect": "read"}),
        types.Tool(name="fail", description="Answers isError.", inputSchema=ANY,
                   annotations=READ),
        types.Tool(name="big", description="A large result.", annotations=READ,
                   inputSchema={"type": "object", "properties": {"size": {"type": "integer"}}}),
        types.Tool(name="change", description="Change the tools (v2) and say so.",
                   inputSchema=ANY, annotations=READ),
    ]
    if variant() == "v2":
        found.append(types.Tool(name="malformed", description="A broken schema.",
                                inputSchema={"type": "nonsense"}, annotations=READ))
    return found


def result(structured: dict[str, Any] | None = None, text: str = "",
           error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structuredContent=structured, isError=error)


async def call(app: FastMCP, name: str, args: dict[str, Any]) -> types.CallToolResult:
    if name == "echo":
        return result({"text": args["text"]}, args["text"])
    if name == "forecast":
        return result(text=f"sunny in {args['city']}")
    if name == "slow":
        await asyncio.sleep(float(args.get("seconds", 5)))
        return result(text="slept")
    if name in ("crash", "crash_write"):
        os._exit(3)
    if name == "bad_output":
        return result({"n": "not a number"})
    if name == "fail":
        return result(text="the tool broke", error=True)
    if name == "big":
        return result(text="x" * int(args.get("size", 10)))
    if name == "change":  # the tools change between two calls, and the server says so
        path = os.environ["MCP_TEST_STATE"]
        with open(path, "w") as f:
            f.write("v2")
        await app._mcp_server.request_context.session.send_tool_list_changed()
        return result(text="changed")
    return result(text=f"{name} ran")


def server(port: int = 0) -> FastMCP:
    app = FastMCP("hypha-tests", host="127.0.0.1", port=port, log_level="WARNING")
    low = app._mcp_server  # the low-level server: its tools listed and called as they are

    @low.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        return tools()

    @low.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, args: dict[str, Any]) -> types.CallToolResult:
        return await call(app, name, args)

    @app.resource("notes://today")
    def today() -> str:
        return "nothing yet"

    @app.prompt()
    def greet(name: str) -> str:
        return f"Say hello to {name}."

    return app


if __name__ == "__main__":
    if sys.argv[1] == "http":
        server(int(sys.argv[2])).run("streamable-http")
    else:
        server().run("stdio")
