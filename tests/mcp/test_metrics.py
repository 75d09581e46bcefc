"""Prometheus metrics of the MCP gateway after real calls to a real MCP server process:
``hypha_mcp_calls_total{server,tool,status}`` for each way a call ends,
``hypha_mcp_call_seconds{server}``, the series of discovered tools at 0, and
``hypha_mcp_tools_quarantined{server}`` read from the store's baselines on scrape."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from prometheus_client import CollectorRegistry

from hypha_celery.errors import McpError
from hypha_celery.mcp import McpGateway, McpServer
from hypha_celery.metrics import HyphaCollector, McpCallStatus, PrometheusMiddleware, names
from hypha_celery.store import EventStore
from tests.mcp.conftest import server_id, stdio_transport

Make = Callable[..., McpGateway]


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    PrometheusMiddleware(reg)  # its metrics: what the gateway's calls are counted in
    return reg


def calls(registry: CollectorRegistry, sid: str, tool: str, status: str) -> float | None:
    return registry.get_sample_value(f"{names.MCP_CALLS}_total",
                                     {"server": sid, "tool": f"{sid}.{tool}", "status": status})


def seconds_count(registry: CollectorRegistry, sid: str) -> float | None:
    return registry.get_sample_value(f"{names.MCP_CALL_SECONDS}_count", {"server": sid})


def invoke(gateway: McpGateway, tool_id: str, args: Any) -> str:
    """Call the tool's handler; the error's type name when it failed."""
    handler = gateway.registry().resolve(tool_id).handler
    try:
        handler(args)
    except McpError as exc:
        return type(exc).__name__
    return "ok"


def test_calls_are_counted_by_status_and_timed_by_server(
        registry: CollectorRegistry, make_gateway: Make, state: Path) -> None:
    server = McpServer(id=server_id(), transport=stdio_transport(state), trust="trusted",
                       drift="accept", call_timeout=1.0, max_result_bytes=1000)
    gateway = make_gateway(server)
    sid = server.id
    gateway.discover(sid)
    # discovery made every callable tool's series, in every status, at 0
    for status in McpCallStatus:
        assert calls(registry, sid, "echo", status.value) == 0.0, status
    assert seconds_count(registry, sid) == 0.0
    outcomes = [invoke(gateway, f"{sid}.echo", {"text": "a"}),
                invoke(gateway, f"{sid}.echo", {"text": "b"}),
                invoke(gateway, f"{sid}.fail", {}),
                invoke(gateway, f"{sid}.big", {"size": 5000}),
                invoke(gateway, f"{sid}.slow", {"seconds": 30}),
                invoke(gateway, f"{sid}.crash", {}),
                invoke(gateway, f"{sid}.crash_write", {})]
    assert outcomes == ["ok", "ok", "McpToolError", "McpResultTooLarge", "McpTimeout",
                        "McpUnavailable", "McpOutcomeUnknown"]
    expected = {("echo", "completed"): 2, ("fail", "failed"): 1, ("big", "too_large"): 1,
                ("slow", "timeout"): 1, ("crash", "unavailable"): 1,
                ("crash_write", "outcome_unknown"): 1}
    for (tool, status), n in expected.items():
        assert calls(registry, sid, tool, status) == n, (tool, status)
    assert calls(registry, sid, "echo", "failed") == 0.0
    assert seconds_count(registry, sid) == 7
    total = registry.get_sample_value(f"{names.MCP_CALL_SECONDS}_sum", {"server": sid})
    assert total is not None and total >= 1.0  # the timeout alone waited call_timeout


def test_quarantined_tools_are_a_gauge_read_from_the_baselines(
        make_gateway: Make, state: Path, store: EventStore) -> None:
    app = Celery("mcp-gauge", broker="memory://")
    registry = CollectorRegistry()
    registry.register(HyphaCollector(app, lambda: [], store))

    def quarantined(sid: str) -> float | None:
        return registry.get_sample_value(names.MCP_TOOLS_QUARANTINED, {"server": sid})

    server = McpServer(id=server_id(), transport=stdio_transport(state), trust="trusted")
    gateway = make_gateway(server)
    assert quarantined(server.id) is None  # never discovered: no baseline, no series
    found = gateway.discover(server.id)
    assert quarantined(server.id) == len(found.tools) == 11
    gateway.accept(server.id, "echo", by="alice")
    gateway.accept(server.id, "forecast", by="alice")
    assert quarantined(server.id) == 9
    accepting = McpServer(id=server_id(), transport=stdio_transport(state), trust="trusted",
                          drift="accept")
    make_gateway(accepting).discover(accepting.id)
    assert quarantined(accepting.id) == 0.0  # a server with baselines, none quarantined
    app.close()
