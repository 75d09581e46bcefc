"""MCP tools where local tools go: a workflow state (FSM), a ReAct loop, a model's tool
list; discovery recorded in the log of the run whose node discovered; a forked child
opening its own connection. Real MCP server processes, the real embedded runtime."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph, Hypha, Next, NodeContext
from hypha_celery.backends.llm import tool_decls
from hypha_celery.fsm import Fsm, WorkflowSpec, workflow_graph
from hypha_celery.mcp import McpGateway, McpServer, mcp_node
from hypha_celery.react import MockProvider, react_graph
from tests.mcp.conftest import server_id, stdio_transport
from tests.runtime.support import WAIT, assert_well_formed, of_kind, running

Make = Callable[..., McpGateway]


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    with running(store_url) as h:
        yield h


@pytest.fixture
def gateway(make_gateway: Make, state: Path) -> McpGateway:
    server = McpServer(id=server_id(), transport=stdio_transport(state), trust="trusted",
                       drift="accept")
    made = make_gateway(server)
    made.discover(server.id)
    return made


def sid(gateway: McpGateway) -> str:
    return next(iter(gateway.servers))


def test_a_workflow_state_calls_an_mcp_tool(hypha: Hypha, gateway: McpGateway) -> None:
    spec = WorkflowSpec.model_validate({
        "id": "mcp_flow", "initial_state": "Start", "terminal_states": ["Done"],
        "output": "variables.tool_result",
        "states": [{"id": "Start"}, {"id": "Done"}, {"id": "Echo", "node": "echo"}],
        "transitions": [{"from": "Start", "to": "Echo"}, {"from": "Echo", "to": "Done"}]})
    nodes = {"echo": mcp_node(gateway, f"{sid(gateway)}.echo")}
    hypha.register(workflow_graph(Fsm(spec, nodes), nodes))
    run = hypha.start("mcp_flow", {"text": "from a workflow"})
    result = run.wait(WAIT)
    assert (result["status"], result["output"]) == ("completed", {"text": "from a workflow"})
    assert [e.data["to"] for e in of_kind(run, "fsm.transition.accepted")][-1] == "Done"
    assert of_kind(run, "mcp.call.completed")
    assert_well_formed(run)


def test_a_react_loop_calls_mcp_tools_as_it_calls_local_ones(
        hypha: Hypha, gateway: McpGateway) -> None:
    tool = f"{sid(gateway)}.echo"
    provider = MockProvider([{"action": "tool", "tool": tool, "input": {"text": "found"}},
                             {"action": "finish", "output": "unused"}])
    hypha.register(react_graph(provider, gateway.registry()))
    run = hypha.start("react", {"question": "echo?"})
    assert run.wait(WAIT) == {"answer": {"text": "found"}, "iterations": 1}
    requested = of_kind(run, "tool.call.requested")[0].data
    assert (requested["tool"], requested["source"]) == (tool, "mcp")
    # the gateway's own events, in the run's log with the act node's outcome
    mcp = [e for e in run.events() if e.kind.startswith("mcp.call.")]
    assert [(e.kind, e.data["tool"]) for e in mcp] == [
        ("mcp.call.started", tool), ("mcp.call.completed", tool)]
    acted = of_kind(run, "tool.call.completed")[0]
    assert {e.execution_id for e in mcp} == {acted.execution_id}
    assert_well_formed(run)


def test_a_react_loop_records_a_failed_mcp_call(hypha: Hypha, gateway: McpGateway) -> None:
    tool = f"{sid(gateway)}.fail"
    provider = MockProvider([{"action": "tool", "tool": tool, "input": {}},
                             {"action": "finish", "output": "gave up"}])
    hypha.register(react_graph(provider, gateway.registry()))
    run = hypha.start("react", {"question": "fail?"})
    assert run.wait(WAIT)["answer"] == "gave up"
    failed = of_kind(run, "mcp.call.failed")
    assert [(e.data["tool"], e.data["error_type"]) for e in failed] == [(tool, "McpToolError")]
    assert of_kind(run, "tool.call.failed")[0].data["tool"] == tool
    assert_well_formed(run)


def test_a_models_tool_list_takes_the_gateways_specs(gateway: McpGateway) -> None:
    decls = tool_decls(gateway.specs())
    names = {d.name for d in decls}
    assert f"{sid(gateway)}.echo" in names and len(decls) == len(gateway.specs())
    echo = next(d for d in decls if d.name == f"{sid(gateway)}.echo")
    assert echo.parameters["required"] == ["text"]


def test_a_discovery_made_by_a_node_is_in_that_runs_log(
        hypha: Hypha, make_gateway: Make, state: Path) -> None:
    server = McpServer(id=server_id(), transport=stdio_transport(state), trust="trusted")
    gateway = make_gateway(server)

    def discover(state_: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        found = gateway.discover(server.id, record=ctx.record)
        return {"quarantined": sorted(t.name for t in found.tools if t.spec is None)}

    def policy(ctx: Context) -> Next | Finish:
        return Next("discover", ctx.input) if ctx.step == 0 else Finish(ctx.state)

    hypha.register(Graph("mcp_discover", {"discover": discover}, policy))
    run = hypha.start("mcp_discover", {})
    assert "echo" in run.wait(WAIT)["quarantined"]
    kinds = {e.kind for e in run.events()}
    assert {"mcp.capability.discovered", "mcp.capability.trust.evaluated",
            "mcp.capability.drift.detected", "mcp.capability.quarantined"} <= kinds
    assert_well_formed(run)


def test_a_forked_child_opens_its_own_connection(gateway: McpGateway) -> None:
    tool = f"{sid(gateway)}.echo"
    handler = gateway.registry().resolve(tool).handler
    assert handler({"text": "parent"}) == {"text": "parent"}
    parent = gateway.connection(sid(gateway))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child (told by os.register_at_fork): the parent's connection and
        code = 1  # loop are not its own
        try:
            child = gateway.connection(sid(gateway))
            fresh = gateway.registry().resolve(tool).handler
            ok = child is not parent and fresh({"text": "child"}) == {"text": "child"}
            code = 0 if ok and child.opened == 1 else 2
            gateway.close()
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    status = os.read(read, 1)
    os.waitpid(pid, 0)
    assert status == b"\x00"
    assert handler({"text": "parent again"}) == {"text": "parent again"}
    assert gateway.connection(sid(gateway)) is parent and parent.opened == 1
