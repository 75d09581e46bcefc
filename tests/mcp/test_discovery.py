"""Discovery against a real MCP server (stdio and streamable HTTP): tools normalized into
ToolSpecs by trust, a baseline per tool, drift between two discoveries quarantined until
accepted, a malformed schema recorded, not raised."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hypha_celery.errors import CapabilityQuarantined, McpProfileError
from hypha_celery.mcp import (
    DriftPolicy,
    HttpTransport,
    McpGateway,
    McpServer,
    StdioTransport,
    ToolState,
    Trust,
    accept,
)
from hypha_celery.store import EventStore
from tests.mcp.conftest import Recorded, server_id

Make = Callable[..., McpGateway]


def profile(transport: StdioTransport | HttpTransport, **kw: object) -> McpServer:
    return McpServer.model_validate({"id": server_id(), "transport": transport, **kw})


def test_a_first_discovery_normalizes_every_tool_and_quarantines_them_all(
        make_gateway: Make, transport: StdioTransport | HttpTransport) -> None:
    server = profile(transport, trust="trusted")
    record = Recorded()
    found = make_gateway(server, record=record).discover(server.id)
    assert {t.name for t in found.tools} >= {"echo", "forecast", "crash_write", "note"}
    assert all(t.state is ToolState.QUARANTINED and t.change == "added" for t in found.tools)
    assert found.callable() == []
    assert found.resources == ("notes://today",) and found.prompts == ("greet",)
    levels = {t.name: (t.declared, t.side_effect) for t in found.tools}
    assert levels["echo"] == ("read", "read")  # readOnlyHint
    assert levels["crash_write"] == ("write", "write")  # destructiveHint false
    assert levels["note"] == ("read", "read")  # _meta hypha/side_effect
    assert levels["undeclared"] == ("external_effect", "external_effect")
    echo = [k for k, p in record if p.get("capability") == "echo"]
    assert echo == ["mcp.capability.discovered", "mcp.capability.trust.evaluated",
                    "mcp.capability.drift.detected", "mcp.capability.quarantined"]
    assert ("mcp.capability.discovered", {"server": server.id, "capability": "greet",
                                          "capability_type": "prompt"}) in record


def test_accepted_tools_are_tool_specs_with_the_servers_schemas(
        make_gateway: Make, transport: StdioTransport | HttpTransport,
        store: EventStore) -> None:
    server = profile(transport, trust="trusted")
    gateway = make_gateway(server)
    gateway.discover(server.id)
    row = gateway.accept(server.id, "echo", "alice")
    assert (row.status, row.decided_by) == ("approved", "alice")
    record = Recorded()
    found = gateway.discover(server.id, record=record)
    echo = found.tool("echo")
    assert echo.state is ToolState.CALLABLE and echo.change is None
    assert echo.spec is not None
    assert echo.spec.id == f"{server.id}.echo" and echo.spec.source == "mcp"
    assert echo.spec.input_schema["required"] == ["text"]
    assert echo.spec.output_schema is not None and echo.spec.side_effect == "read"
    assert [s.id for s in gateway.specs()] == [f"{server.id}.echo"]
    assert ("mcp.tool.normalized", {"server": server.id, "capability": "echo",
                                    "tool": f"{server.id}.echo", "side_effect": "read",
                                    "capability_hash": echo.capability_hash}) in record
    assert store.mcp_baseline(server.id, "forecast").status == "quarantined"  # type: ignore[union-attr]


def test_an_untrusted_servers_read_becomes_external_effect(
        make_gateway: Make, state: Path) -> None:
    from tests.mcp.conftest import stdio_transport

    server = profile(stdio_transport(state), drift="accept")
    assert server.trust is Trust.UNTRUSTED and server.drift is DriftPolicy.ACCEPT
    found = make_gateway(server).discover(server.id)
    echo, write = found.tool("echo"), found.tool("crash_write")
    assert (echo.declared, echo.side_effect) == ("read", "external_effect")
    assert (write.declared, write.side_effect) == ("write", "write")  # kept
    assert echo.state is ToolState.CALLABLE  # the drift policy accept


def test_drift_between_two_discoveries_quarantines_the_changed_tool_until_accepted(
        make_gateway: Make, transport: StdioTransport | HttpTransport, state: Path) -> None:
    server = profile(transport, trust="trusted", drift="accept")
    gateway = make_gateway(server)
    first = gateway.discover(server.id)
    assert first.tool("forecast").state is ToolState.CALLABLE
    # the same server, the same connection: its tools change between two discoveries
    strict = server.model_copy(update={"drift": DriftPolicy.QUARANTINE})
    gateway.servers[server.id] = strict
    gateway.connection(server.id).server = strict
    state.write_text("v2")
    record = Recorded()
    second = gateway.discover(server.id, record=record)
    forecast = second.tool("forecast")
    assert (forecast.state, forecast.change) == (ToolState.QUARANTINED, "changed")
    assert forecast.capability_hash != first.tool("forecast").capability_hash
    assert second.tool("echo").state is ToolState.CALLABLE  # unchanged
    drift = next(p for k, p in record if k == "mcp.capability.drift.detected"
                 and p["capability"] == "forecast")
    assert drift["baseline_hash"] == first.tool("forecast").capability_hash
    with pytest.raises(CapabilityQuarantined):
        gateway.spec(f"{server.id}.forecast")
    assert f"{server.id}.forecast" not in gateway.registry()
    gateway.accept(server.id, "forecast", "ops", capability_hash=forecast.capability_hash)
    assert gateway.spec(f"{server.id}.forecast").input_schema["properties"]["days"]


def test_a_malformed_tool_schema_is_a_recorded_failure_not_a_crash(
        make_gateway: Make, transport: StdioTransport | HttpTransport, state: Path,
        store: EventStore) -> None:
    state.write_text("v2")
    server = profile(transport, trust="trusted", drift="accept")
    record = Recorded()
    found = make_gateway(server, record=record).discover(server.id)
    bad = found.tool("malformed")
    assert bad.state is ToolState.INVALID and bad.spec is None
    assert bad.problem is not None and "input_schema" in bad.problem
    assert found.tool("echo").state is ToolState.CALLABLE  # the others go on
    quarantined = [p for k, p in record if k == "mcp.capability.quarantined"]
    assert [p["capability"] for p in quarantined] == ["malformed"]
    assert str(quarantined[0]["reason"]).startswith("invalid: ")
    assert store.mcp_baseline(server.id, "malformed").status == "quarantined"  # type: ignore[union-attr]


def test_allowed_tools_keeps_the_others_out(make_gateway: Make, state: Path) -> None:
    from tests.mcp.conftest import stdio_transport

    server = profile(stdio_transport(state), trust="trusted", drift="accept",
                     allowed_tools=["ec*", "note"])
    found = make_gateway(server).discover(server.id)
    assert sorted(s.id.split(".")[1] for s in found.callable()) == ["echo", "note"]
    assert found.tool("forecast").state is ToolState.NOT_ALLOWED
    with pytest.raises(McpProfileError, match="no tool 'forecast' it allows"):
        make_gateway(server).spec(f"{server.id}.forecast")


def test_accept_names_a_tool_that_was_never_discovered(store: EventStore) -> None:
    with pytest.raises(McpProfileError, match="no discovered tool"):
        accept(store, "nobody", "nothing", "alice")


@pytest.mark.parametrize("bad", [
    {"id": "1x", "transport": {"kind": "stdio", "command": "x"}},
    {"id": "ok", "transport": {"kind": "http", "url": "ftp://x"}},
    {"id": "ok", "transport": {"kind": "stdio", "command": "x"}, "call_timeout": 0},
    {"id": "ok", "transport": {"kind": "stdio", "command": "x"}, "max_result_bytes": 1 << 40},
    {"id": "ok", "transport": {"kind": "stdio", "command": "x"}, "trust": "maybe"},
])
def test_a_bad_profile_is_a_profile_error_naming_the_field(bad: dict[str, object]) -> None:
    with pytest.raises(McpProfileError, match="mcp server profile: "):
        McpServer.model_validate(bad)


def test_a_server_that_changes_its_tools_between_calls_is_discovered_again(
        make_gateway: Make, transport: StdioTransport | HttpTransport) -> None:
    from hypha_celery.tools import GovernedRunner

    server = profile(transport, trust="trusted", drift="accept")
    gateway = make_gateway(server)
    gateway.discover(server.id)
    gateway.servers[server.id] = strict = server.model_copy(
        update={"drift": DriftPolicy.QUARANTINE})
    gateway.connection(server.id).server = strict
    forecast = f"{server.id}.forecast"
    assert gateway.spec(forecast).input_schema["required"] == ["city"]
    runner = GovernedRunner(gateway.registry(), None, lambda k, p: None)
    assert runner.run(f"{server.id}.change", {}).status == "completed"
    # the server said notifications/tools/list_changed: the next use discovers again
    deadline = time.monotonic() + 10
    while gateway.connection(server.id).tools_changed == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(CapabilityQuarantined, match="quarantined"):
        gateway.spec(forecast)
    assert forecast not in gateway.registry()
    assert gateway.discovery(server.id).tool("forecast").change == "changed"


def test_a_discovery_takes_at_most_max_tools(make_gateway: Make, state: Path) -> None:
    from tests.mcp.conftest import stdio_transport

    server = profile(stdio_transport(state), max_tools=2)
    found = make_gateway(server).discover(server.id)
    assert [t.name for t in found.tools] == ["echo", "forecast"]
