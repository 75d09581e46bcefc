"""An MCP effect call lost mid-way (``McpOutcomeUnknown``: the server process died during
a ``write`` tool's call) quarantines the run: no retry, no ``run.failed``, the
``mcp.call.failed`` (``outcome_unknown``) and ``tool.call.*`` events in the log. A human
releases it (the node runs again as its next attempt, over a new server process) or fails
it. Real MCP server processes over stdio (tests/mcp/servers/tools_server.py), the
embedded runtime over the real store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph, Hypha, Next, Node, NodeContext, RetryPolicy
from hypha_celery.errors import RunFailed
from hypha_celery.mcp import McpGateway, McpServer, call_mcp, mcp_node
from hypha_celery.testing import wait_until
from hypha_celery.tools import summary
from tests.mcp.conftest import server_id, stdio_transport
from tests.runtime.support import WAIT, assert_well_formed, kinds, of_kind, running

Make = Callable[..., McpGateway]
#: Retries every class, "unknown" included: an unknown outcome must still not be retried.
EVERYTHING = RetryPolicy(max_attempts=3, backoff=0.01, max_backoff=0.02,
                         retry_on=("transient", "timeout", "unknown"))


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    with running(store_url) as h:
        yield h


def accepted(make: Make, state: Path) -> tuple[McpGateway, str]:
    server = McpServer.model_validate({"id": server_id(), "transport": stdio_transport(state),
                                       "trust": "trusted", "drift": "accept"})
    gateway = make(server)
    gateway.discover(server.id)
    return gateway, server.id


def once(node: str) -> Any:
    def policy(ctx: Context) -> Next | Finish:
        return Next(node, ctx.input) if ctx.step == 0 else Finish(ctx.state)
    return policy


def quarantined(hypha: Hypha, run_id: str) -> None:
    wait_until(lambda: hypha.store.get(run_id)["status"] == "quarantined", WAIT,
               "the run to be quarantined")


def assert_quarantined_with_the_calls_logged(hypha: Hypha, run_id: str, sid: str) -> None:
    run = hypha.get_run(run_id)
    view = hypha.store.get(run_id)
    assert view["quarantine"] == {"execution_id": f"{run_id}.1", "node_id": "send",
                                  "reason": "effect_outcome_unknown", "attempt": 1}
    (failed,) = of_kind(run, "mcp.call.failed")
    assert (failed.data["server"], failed.data["error_type"], failed.data["outcome_unknown"]) \
        == (sid, "McpOutcomeUnknown", True)
    seen = kinds(run)
    for kind in ("node.execution.started", "tool.call.requested", "mcp.call.started",
                 "tool.call.failed", "run.quarantined"):
        assert kind in seen, kind
    for kind in ("node.execution.retrying", "node.execution.failed", "run.failed"):
        assert kind not in seen, kind


def test_a_lost_effect_call_quarantines_the_run_and_release_runs_the_node_again(
        hypha: Hypha, make_gateway: Make, state: Path) -> None:
    gateway, sid = accepted(make_gateway, state)
    attempts: list[int] = []

    def send(state_: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        attempts.append(ctx.attempt)
        # the first call's server dies mid-call; once released, the operator has fixed the
        # server and the next attempt's call answers (a new server process)
        tool = "crash_write" if ctx.attempt == 1 else "echo"
        result = call_mcp(ctx, gateway, f"{sid}.{tool}", inp)
        return {"sent": summary(result), "attempt": ctx.attempt}

    hypha.register(Graph("mq1", {"send": Node(send, side_effect="external_effect",
                                              retry=EVERYTHING)}, once("send")))
    run = hypha.start("mq1", {"text": "order 42"})
    quarantined(hypha, run.id)
    assert_quarantined_with_the_calls_logged(hypha, run.id, sid)
    assert attempts == [1] and gateway.connection(sid).opened == 1

    hypha.release(run.id)
    result = run.wait(WAIT)
    assert result["attempt"] == 2 and result["sent"]["output"] == {"text": "order 42"}
    assert attempts == [1, 2] and gateway.connection(sid).opened == 2  # reconnected
    assert [e.data["attempt"] for e in of_kind(run, "node.execution.started")] == [1, 2]
    assert len(of_kind(run, "mcp.call.completed")) == 1
    assert_well_formed(run)


def test_a_quarantined_mcp_effect_can_be_failed_by_a_human(
        hypha: Hypha, make_gateway: Make, state: Path) -> None:
    gateway, sid = accepted(make_gateway, state)
    node = mcp_node(gateway, f"{sid}.crash_write", side_effect="external_effect",
                    retry=EVERYTHING)
    hypha.register(Graph("mq2", {"send": node}, once("send")))
    run = hypha.start("mq2", {})
    quarantined(hypha, run.id)
    assert_quarantined_with_the_calls_logged(hypha, run.id, sid)
    hypha.fail_quarantined(run.id, "checked the remote system: the write landed")
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "quarantined"
    assert gateway.connection(sid).opened == 1  # never called again
    assert_well_formed(run)
