"""Backends for long-running conversational agents (GenAgent's backend contract): the
``Backend`` base, stream ``BackendEvent`` s (formerly ``Event``), the turn ``Response``
and its builder ``collect``, the normalized ``BackendError``, the scriptable
``MockBackend`` and the hosted-model backends ``OpenAIBackend`` and ``AnthropicBackend``
(their SDKs load at the first session). ``ClaudeCodeBackend`` and ``CodexBackend`` run
those CLIs as subprocesses (no Python dependency; the CLI must be installed)."""

import warnings
from typing import Any

from hypha_celery.backends.anthropic import AnthropicBackend
from hypha_celery.backends.base import Backend, Checkpoint, Session
from hypha_celery.backends.claude_code import ClaudeCodeBackend
from hypha_celery.backends.cli import CliBackend, CliExit
from hypha_celery.backends.codex import CodexBackend
from hypha_celery.backends.error import BackendError
from hypha_celery.backends.event import TERMINAL_KINDS, BackendEvent, InvalidEvent
from hypha_celery.backends.gate import GateChannel, gate_channel
from hypha_celery.backends.hosted import HostedBackend
from hypha_celery.backends.mock import MockBackend
from hypha_celery.backends.openai import OpenAIBackend
from hypha_celery.backends.process import CliNotInstalled
from hypha_celery.backends.response import Response, TurnError, collect
from hypha_celery.backends.tools import ToolAnswer, ToolExecutor, ToolRequest

__all__ = [
    "TERMINAL_KINDS",
    "AnthropicBackend",
    "Backend",
    "BackendError",
    "Checkpoint",
    "ClaudeCodeBackend",
    "CliBackend",
    "CliExit",
    "CliNotInstalled",
    "CodexBackend",
    "BackendEvent",
    "GateChannel",
    "HostedBackend",
    "InvalidEvent",
    "MockBackend",
    "OpenAIBackend",
    "Response",
    "Session",
    "ToolAnswer",
    "ToolExecutor",
    "ToolRequest",
    "TurnError",
    "collect",
    "gate_channel",
]


def __getattr__(name: str) -> Any:
    if name == "Event":  # renamed: the run's Event is hypha_celery.Event
        warnings.warn("hypha_celery.backends.Event has been renamed to BackendEvent",
                      DeprecationWarning, stacklevel=2)
        return BackendEvent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
