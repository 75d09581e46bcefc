"""Backends for long-running conversational agents (GenAgent's backend contract): the
``Backend`` base, stream ``Event`` s, the turn ``Response`` and its builder ``collect``,
the normalized ``BackendError``, the scriptable ``MockBackend`` and the hosted-model
backends ``OpenAIBackend`` and ``AnthropicBackend`` (their SDKs load at the first session).
``ClaudeCodeBackend`` and ``CodexBackend`` run those CLIs as subprocesses (no Python
dependency; the CLI must be installed)."""

from hypha_celery.backends.anthropic import AnthropicBackend
from hypha_celery.backends.base import Backend, Checkpoint, Session
from hypha_celery.backends.claude_code import ClaudeCodeBackend
from hypha_celery.backends.cli import CliBackend, CliExit
from hypha_celery.backends.codex import CodexBackend
from hypha_celery.backends.error import BackendError
from hypha_celery.backends.event import TERMINAL_KINDS, Event, InvalidEvent
from hypha_celery.backends.gate import GateChannel, gate_channel
from hypha_celery.backends.hosted import HostedBackend
from hypha_celery.backends.mock import MockBackend
from hypha_celery.backends.openai import OpenAIBackend
from hypha_celery.backends.process import CliNotInstalled
from hypha_celery.backends.response import Response, TurnError, collect

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
    "Event",
    "GateChannel",
    "HostedBackend",
    "InvalidEvent",
    "MockBackend",
    "OpenAIBackend",
    "Response",
    "Session",
    "TurnError",
    "collect",
    "gate_channel",
]
