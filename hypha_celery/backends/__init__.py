"""Backends for long-running conversational agents (GenAgent's backend contract): the
``Backend`` base, stream ``Event`` s, the turn ``Response`` and its builder ``collect``,
the normalized ``BackendError``, and the scriptable ``MockBackend``."""

from hypha_celery.backends.base import Backend, Checkpoint, Session
from hypha_celery.backends.error import BackendError
from hypha_celery.backends.event import TERMINAL_KINDS, Event, InvalidEvent
from hypha_celery.backends.gate import GateChannel, gate_channel
from hypha_celery.backends.mock import MockBackend
from hypha_celery.backends.response import Response, TurnError, collect

__all__ = [
    "TERMINAL_KINDS",
    "Backend",
    "BackendError",
    "Checkpoint",
    "Event",
    "GateChannel",
    "InvalidEvent",
    "MockBackend",
    "Response",
    "Session",
    "TurnError",
    "collect",
    "gate_channel",
]
