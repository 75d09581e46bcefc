"""The MCP gateway's calls, observed: ``hypha_mcp_calls_total{server,tool,status}`` and
``hypha_mcp_call_seconds{server}``.

The gateway (:mod:`hypha_celery.mcp`) tells :func:`observe_mcp_call` how each tool call
ended, in the process that made it, whatever called the tool (a node, ReAct, an agent's
turn, a runner of your own); each :class:`~hypha_celery.metrics.PrometheusMiddleware`'s
metrics of the process count it (none built: nothing is counted, nothing is imported).
:func:`declare_mcp_tools` makes, at 0, the series of the tools a discovery found
callable, every status: ``server`` and ``tool`` come from the gateway's profiles and the
tools their servers list (at most ``max_tools`` each), never from a call's input, so the
labels stay as bounded as the servers an operator declared.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from hypha_celery.metrics._initial import built

__all__ = ["McpCallStatus", "declare_mcp_tools", "observe_mcp_call"]


class McpCallStatus(StrEnum):
    """How an MCP tool call ended (the ``status`` label)."""

    COMPLETED = "completed"
    #: The tool answered ``isError``, or the server a JSON-RPC error.
    FAILED = "failed"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    #: An effect call lost mid-way (``McpOutcomeUnknown``): it may have happened.
    OUTCOME_UNKNOWN = "outcome_unknown"
    #: A result past the profile's ``max_result_bytes``.
    TOO_LARGE = "too_large"


def observe_mcp_call(server: str, tool: str, status: McpCallStatus, seconds: float) -> None:
    """Count one call of ``tool`` (``<server>.<name>``) that ended ``status`` after
    ``seconds``."""
    for metrics in built():
        metrics.mcp_calls.labels(server, tool, status.value).inc()
        metrics.mcp_call_seconds.labels(server).observe(seconds)


def declare_mcp_tools(server: str, tools: Iterable[str]) -> None:
    """The series of ``server``'s ``tools`` (ids), at 0, in every status; idempotent."""
    every = built()
    if not every:
        return
    ids = list(tools)
    for metrics in every:
        metrics.mcp_call_seconds.labels(server)
        for tool in ids:
            for status in McpCallStatus:
                metrics.mcp_calls.labels(server, tool, status.value)
