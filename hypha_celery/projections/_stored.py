"""The views over what an event store holds (the views themselves are pure)."""

from __future__ import annotations

from hypha_celery.projections._session import SessionView, session_view
from hypha_celery.store import EventStore

__all__ = ["runs_of_session", "stored_session"]


def runs_of_session(store: EventStore, user_id: str, session_id: str) -> list[str]:
    """Ids of the runs of ``(user_id, session_id)``, in the order they were created.
    (No index serves this: it reads the whole runs table. It is an operator's query.)"""
    return store.session_runs(user_id, session_id)


def stored_session(store: EventStore, user_id: str, session_id: str) -> SessionView:
    """:func:`session_view` over the events of the session's runs in ``store``."""
    events = [e for run_id in runs_of_session(store, user_id, session_id)
              for e in store.events(run_id)]
    return session_view(events, user_id, session_id)
