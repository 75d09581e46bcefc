"""Long-running conversational agents (GenAgent's model) on durable lanes.

An agent is a named row plus events, not a process: it costs nothing while idle, survives
worker restarts, and any worker can serve its next turn. Talk to it through
``hypha.agents`` (:class:`~hypha_celery.agents.api.Agents`); write one by subclassing
:class:`Agent`. See ``docs/agents.md``.
"""

import warnings
from typing import Any

from hypha_celery.agents.api import AgentInfo, Agents, AgentStatus, Poll
from hypha_celery.agents.behaviour import (
    Agent,
    AgentDecision,
    Halt,
    NoReply,
    Prompt,
    TurnOutcome,
    current_name,
)
from hypha_celery.agents.channels import Channel
from hypha_celery.agents.options import Limits
from hypha_celery.agents.telemetry import attach, detach
from hypha_celery.agents.tools import AgentTools
from hypha_celery.backends import Response, TurnError
from hypha_celery.errors import (
    AgentAlreadyStarted,
    AgentError,
    AgentNotFound,
    AgentSpecError,
    AgentStartFailed,
    Overloaded,
    TurnFailed,
)

__all__ = [
    "Agent",
    "AgentAlreadyStarted",
    "AgentError",
    "AgentInfo",
    "AgentNotFound",
    "AgentSpecError",
    "AgentStartFailed",
    "AgentStatus",
    "AgentTools",
    "Agents",
    "Channel",
    "AgentDecision",
    "TurnOutcome",
    "Halt",
    "Limits",
    "NoReply",
    "Overloaded",
    "Poll",
    "Prompt",
    "Response",
    "TurnError",
    "TurnFailed",
    "attach",
    "current_name",
    "detach",
]


def __getattr__(name: str) -> Any:
    if name == "Decision":  # renamed: hypha_celery.graph's Decision is a graph node's
        warnings.warn("hypha_celery.agents.Decision has been renamed to AgentDecision",
                      DeprecationWarning, stacklevel=2)
        return AgentDecision
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
