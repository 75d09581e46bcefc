""":class:`EventStore`, the one interface of the store: its concerns mixed into one class."""

from __future__ import annotations

from hypha_celery.store.events import EventLog
from hypha_celery.store.imports import Imports
from hypha_celery.store.mcp import McpBaselines
from hypha_celery.store.memory import MemoryStore
from hypha_celery.store.outcomes import Outcomes
from hypha_celery.store.recovery import Recovery
from hypha_celery.store.sessions import Sessions
from hypha_celery.store.stats import Stats


class EventStore(EventLog, Outcomes, Recovery, Imports, Stats, Sessions, McpBaselines,
                 MemoryStore):
    """Append-only events with a per-run projection (SQLAlchemy 2 Core; SQLite embedded,
    PostgreSQL in production). Safe to share across threads; each process (after fork)
    builds its own engines.

    By concern: engines and schema (:mod:`~hypha_celery.store.engine`), write
    transactions (:mod:`~hypha_celery.store.tx`), the projection's reads
    (:mod:`~hypha_celery.store.projection`), the event log and export
    (:mod:`~hypha_celery.store.events`), edge outcomes (:mod:`~hypha_celery.store.outcomes`),
    recovery records (:mod:`~hypha_celery.store.recovery`), the import
    (:mod:`~hypha_celery.store.imports`), a window's figures
    (:mod:`~hypha_celery.store.stats`), sessions (:mod:`~hypha_celery.store.sessions`),
    the MCP gateway's baselines (:mod:`~hypha_celery.store.mcp`), governed memory
    (:mod:`~hypha_celery.store.memory`)."""
