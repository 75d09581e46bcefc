"""Governed tools for conversational agents: the tool-execution seam
(:mod:`hypha_celery.backends.tools`) filled with a :class:`~hypha_celery.tools.GovernedRunner`.

``hypha.agents.use_tools(AgentTools(registry, policy))`` gives every turn of this process's
agents a runner over ``registry`` (local tools, and MCP tools registered from the gateway)
under ``policy`` (hypha's default: ``external_effect`` and ``irreversible`` denied). A
hosted-model agent started with ``run_tools=True`` then has its model's tool calls run
through it within the turn: scope, policy, review, schemas, at most once per call id. Each
step is an event of the agent's own stream (``tool.call.requested``,
``tool.policy.checked``, ``tool.call.completed`` ..., and an MCP tool's ``mcp.call.*``),
written while the turn still owns the agent (a stale turn writes nothing). Without
``use_tools`` tool calls end the turn, for the application to answer
(``HostedBackend.tool_results``), as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hypha_celery.events.payloads import Payload, payload_of
from hypha_celery.mcp import recording
from hypha_celery.tools import (
    ApprovalStore,
    GovernedRunner,
    MemoryApprovals,
    ToolPolicy,
    ToolRegistry,
)

__all__ = ["AgentTools"]

#: Where a turn's tool events go: the agent's stream, fenced by the turn.
Emit = Callable[[Payload], None]


@dataclass
class AgentTools:
    """The tools agents' turns may run and what governs them: ``registry``, ``policy``
    (None: hypha's default) and ``approvals`` (reviews and stored results; default: this
    process's memory)."""

    registry: ToolRegistry
    policy: ToolPolicy | None = None
    approvals: ApprovalStore = field(default_factory=MemoryApprovals)

    def runner(self, emit: Emit) -> GovernedRunner:
        """A runner for one turn, recording its events (and its MCP tools' ``mcp.call.*``)
        through ``emit``."""
        def record(type_: str, payload: Mapping[str, object], /) -> None:
            emit(payload_of(type_, dict(payload)))
        return GovernedRunner(recording(self.registry, record), self.policy, record,
                              self.approvals)
