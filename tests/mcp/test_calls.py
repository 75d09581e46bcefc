"""MCP tool calls through the governed runner, against real MCP server processes: from a
real graph run (embedded runtime, the real store), one connection per process reused,
and each way a call fails as a typed, classified, recorded failure."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph, Hypha, Next, RetryPolicy, RunFailed
from hypha_celery.errors import McpTimeout, McpUnavailable
from hypha_celery.mcp import HttpTransport, McpGateway, McpServer, StdioTransport, mcp_node
from hypha_celery.testing import wait_until
from hypha_celery.tools import GovernedRunner, ToolPolicy, ToolResult
from tests.mcp.conftest import Recorded, server_id, stdio_transport
from tests.runtime.support import WAIT, assert_well_formed, of_kind, running

Make = Callable[..., McpGateway]
FAST = RetryPolicy(max_attempts=3, backoff=0.02, max_backoff=0.1)


def once(node: str = "a") -> Any:
    def policy(ctx: Context) -> Next | Finish:
        return Next(node, ctx.input) if ctx.step == 0 else Finish(ctx.state)
    return policy


def accepted(make: Make, transport: StdioTransport | HttpTransport,
             **kw: Any) -> tuple[McpGateway, str]:
    """A gateway over a trusted server whose tools are accepted as discovered."""
    server = McpServer.model_validate({"id": server_id(), "transport": transport,
                                       "trust": "trusted", "drift": "accept", **kw})
    gateway = make(server)
    gateway.discover(server.id)
    return gateway, server.id


def call(gateway: McpGateway, tool_id: str, args: Any,
         invocation_id: str | None = None) -> tuple[ToolResult, Recorded]:
    record = Recorded()
    runner = GovernedRunner(gateway.registry(record=record), ToolPolicy.default(), record)
    return runner.run(tool_id, args, invocation_id=invocation_id), record


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    with running(store_url) as h:
        yield h


def test_a_graph_run_calls_an_mcp_tool_through_the_governed_runner(
        hypha: Hypha, make_gateway: Make, transport: StdioTransport | HttpTransport) -> None:
    gateway, sid = accepted(make_gateway, transport)
    hypha.register(Graph("mcp1", {"a": mcp_node(gateway, f"{sid}.echo")}, once()))
    run = hypha.start("mcp1", {"text": "hello"})
    result = run.wait(WAIT)
    assert result["tool_result"]["status"] == "completed", result["tool_result"]["message"]
    assert result["tool_result"]["output"] == {"text": "hello"}
    kinds = [e.kind for e in run.events()]
    for kind in ("tool.call.requested", "tool.policy.checked", "mcp.call.started",
                 "tool.call.started", "mcp.call.completed", "tool.call.completed",
                 "tool.output.validated"):
        assert kind in kinds, kind
    requested = of_kind(run, "tool.call.requested")[0].data
    assert (requested["tool"], requested["source"], requested["side_effect"]) == (
        f"{sid}.echo", "mcp", "read")
    completed = of_kind(run, "mcp.call.completed")[0].data
    assert completed["server"] == sid and completed["result_bytes"] == len('{"text":"hello"}')
    assert_well_formed(run)
    # a second run (another task of this process) reuses the connection
    assert hypha.start("mcp1", {"text": "again"}).wait(WAIT)["tool_result"]["output"] == {
        "text": "again"}
    assert gateway.connection(sid).opened == 1


def test_a_server_that_dies_mid_call_is_transient_retried_and_reconnected(
        hypha: Hypha, make_gateway: Make, state: Path) -> None:
    gateway, sid = accepted(make_gateway, stdio_transport(state))
    hypha.register(Graph("mcp2", {"a": mcp_node(gateway, f"{sid}.crash", retry=FAST)},
                         once()))
    run = hypha.start("mcp2", {})
    with pytest.raises(RunFailed):
        run.wait(WAIT)
    retrying = of_kind(run, "node.execution.retrying")
    assert len(retrying) == 2 and {e.data["error"]["class"] for e in retrying} == {
        "transient"}
    failed = of_kind(run, "mcp.call.failed")
    assert {(e.data["error_type"], e.data["outcome_unknown"]) for e in failed} == {
        ("McpUnavailable", False)}
    assert gateway.connection(sid).opened == 3  # a new server process per attempt
    result, _ = call(gateway, f"{sid}.echo", {"text": "alive"})
    assert result.output == {"text": "alive"} and gateway.connection(sid).opened == 4


def test_an_effect_lost_mid_call_has_an_unknown_outcome_and_is_not_retried(
        hypha: Hypha, make_gateway: Make, state: Path) -> None:
    gateway, sid = accepted(make_gateway, stdio_transport(state))
    node = mcp_node(gateway, f"{sid}.crash_write", side_effect="write", retry=FAST)
    hypha.register(Graph("mcp3", {"a": node}, once()))
    run = hypha.start("mcp3", {})
    wait_until(lambda: hypha.store.get(run.id)["status"] == "quarantined", WAIT,
               "the run to be quarantined (tests/mcp/test_quarantine.py: release, fail)")
    assert of_kind(run, "node.execution.retrying") == []
    failed = of_kind(run, "mcp.call.failed")[0].data
    assert (failed["outcome_unknown"], failed["error_class"]) == (True, "unknown")


def test_a_slow_server_past_its_timeout_is_a_timeout_and_the_next_call_works(
        make_gateway: Make, state: Path) -> None:
    gateway, sid = accepted(make_gateway, stdio_transport(state), call_timeout=1.0)
    began = time.monotonic()
    result, record = call(gateway, f"{sid}.slow", {"seconds": 30})
    assert time.monotonic() - began < 5
    assert result.status == "failed" and result.error is not None
    assert result.error["type"] == "McpTimeout" and result.error["class"] == "timeout"
    assert ("mcp.call.failed" in record.kinds())
    result, _ = call(gateway, f"{sid}.echo", {"text": "next"})
    assert result.output == {"text": "next"}


def test_a_slow_server_in_a_graph_run_is_retried_as_a_timeout(
        hypha: Hypha, make_gateway: Make, state: Path) -> None:
    gateway, sid = accepted(make_gateway, stdio_transport(state), call_timeout=0.5)
    retry = RetryPolicy(max_attempts=2, backoff=0.02, max_backoff=0.1)
    hypha.register(Graph("mcp4", {"a": mcp_node(gateway, f"{sid}.slow", retry=retry)},
                         once()))
    run = hypha.start("mcp4", {"seconds": 30})
    with pytest.raises(RunFailed):
        run.wait(WAIT)
    assert [e.data["error"]["class"] for e in of_kind(run, "node.execution.retrying")] == [
        "timeout"]


def test_a_result_violating_its_output_schema_is_a_recorded_classified_failure(
        make_gateway: Make, transport: StdioTransport | HttpTransport) -> None:
    gateway, sid = accepted(make_gateway, transport)
    result, record = call(gateway, f"{sid}.bad_output", {})
    assert (result.status, result.code, result.phase) == (
        "failed", "TOOL_OUTPUT_INVALID", "output")
    assert [p for k, p in record if k == "tool.output.invalid"][0]["issues"] == ["$.n"]
    assert "mcp.call.completed" in record.kinds()  # the server answered; the runner refused


def test_the_tools_own_error_and_a_result_past_its_bound_are_typed(
        make_gateway: Make, state: Path) -> None:
    gateway, sid = accepted(make_gateway, stdio_transport(state), max_result_bytes=1000)
    failed, _ = call(gateway, f"{sid}.fail", {})
    assert failed.error is not None and failed.error["type"] == "McpToolError"
    assert "the tool broke" in failed.error["message"]
    big, _ = call(gateway, f"{sid}.big", {"size": 5000})
    assert big.error is not None and big.error["type"] == "McpResultTooLarge"
    assert big.error["class"] == "validation"
    small, _ = call(gateway, f"{sid}.big", {"size": 10})
    assert small.status == "completed"


def test_a_quarantined_tool_is_not_callable_from_a_run(
        hypha: Hypha, make_gateway: Make, state: Path) -> None:
    server = McpServer(id=server_id(), transport=stdio_transport(state), trust="trusted")
    gateway = make_gateway(server)
    hypha.register(Graph("mcp5", {"a": mcp_node(gateway, f"{server.id}.echo", retry=FAST)},
                         once()))
    run = hypha.start("mcp5", {"text": "x"})
    with pytest.raises(RunFailed, match="quarantined|accept"):
        run.wait(WAIT)
    assert of_kind(run, "node.execution.retrying") == []  # class policy: not retried


def test_the_default_policy_denies_an_untrusted_servers_read(
        make_gateway: Make, state: Path) -> None:
    server = McpServer(id=server_id(), transport=stdio_transport(state), drift="accept")
    gateway = make_gateway(server)
    gateway.discover(server.id)
    result, record = call(gateway, f"{server.id}.echo", {"text": "x"}, invocation_id="i-1")
    assert (result.status, result.code) == ("denied", "TOOL_POLICY_DENIED")
    assert "mcp.call.started" not in record.kinds()


def test_an_unreachable_server_is_unavailable(make_gateway: Make) -> None:
    from tests import services

    server = McpServer(id=server_id(), call_timeout=5, transport=HttpTransport(
        url=f"http://127.0.0.1:{services.free_port()}/mcp"))
    with pytest.raises(McpUnavailable) as caught:
        make_gateway(server).discover(server.id)
    assert caught.value.sent is False and caught.value.error_class == "transient"


def test_a_server_process_that_cannot_start_is_unavailable(make_gateway: Make) -> None:
    server = McpServer(id=server_id(), call_timeout=5,
                       transport=StdioTransport(command="/nonexistent/mcp-server"))
    with pytest.raises((McpUnavailable, McpTimeout)):
        make_gateway(server).discover(server.id)


def test_an_http_server_that_dies_mid_call_is_unavailable_at_once(
        make_gateway: Make, http_server: str) -> None:
    # the SDK's streamable HTTP client drops a response stream that breaks without telling
    # the request: the gateway's transport sees the broken connection and ends the call
    gateway, sid = accepted(make_gateway, HttpTransport(url=http_server), call_timeout=20.0)
    began = time.monotonic()
    lost, record = call(gateway, f"{sid}.crash", {})
    assert time.monotonic() - began < 10
    assert lost.error is not None and lost.error["type"] == "McpUnavailable"
    assert [p["error_class"] for k, p in record if k == "mcp.call.failed"] == ["transient"]
    gone, _ = call(gateway, f"{sid}.echo", {"text": "x"})
    assert gone.error is not None and gone.error["type"] == "McpUnavailable"
