"""The event store: append-only events plus a run projection, on SQLAlchemy 2 Core."""

from hypha_celery.store.sql import EventStore, Tx

__all__ = ["EventStore", "Tx"]
