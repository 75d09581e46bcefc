"""What a run records when it opens a session: :class:`SessionOpening`.

The first run started with a ``session_id`` opens the session ``(user_id, session_id)``:
its row and its ``session.created`` event are written in that run's transaction, with the
profile applied (a name, e.g. a pack's session profile) and the session's metadata. Later
runs of the session record nothing more. Metadata is bounded: at most
:data:`MAX_SESSION_METADATA_BYTES` of compact JSON (:class:`~hypha_celery.errors.TooLarge`
otherwise, nothing recorded).

A session is ``active`` until :func:`close_session` closes it (``session.closed``, once;
then a run started in it is :class:`~hypha_celery.errors.SessionClosed`, nothing
recorded); :func:`update_session` merges metadata into it (``session.updated``, the
caller wins key by key, as hypha's ``initializeDomainSession``). Both events go, through
the lifecycle writer, to the log of the run that opened the session, with its
``session.created``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hypha_celery.errors import SessionClosed, SpecError, TooLarge
from hypha_celery.events import payloads as ev
from hypha_celery.graph.jsonsafe import json_size_or_none
from hypha_celery.jsontypes import JsonObject
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore, SessionRow, Tx

__all__ = ["MAX_SESSION_METADATA_BYTES", "SessionOpening", "check_opening", "close_session",
           "refuse_closed", "update_session"]

#: The most bytes (compact JSON) of a session's metadata.
MAX_SESSION_METADATA_BYTES = 16_384


@dataclass(frozen=True, slots=True)
class SessionOpening:
    """How a session opens when a run starts it: the profile applied (``profile``, of
    pack ``pack``: names recorded in ``session.created``), and its metadata."""

    profile: str | None = None
    pack: str | None = None
    metadata: JsonObject = field(default_factory=dict)


def check_opening(opening: SessionOpening | None, session_id: str | None) -> SessionOpening:
    """``opening`` checked at the entry point (a typed error, nothing recorded)."""
    if opening is None:
        return SessionOpening()
    if not isinstance(opening, SessionOpening):
        raise SpecError(f"session= takes a SessionOpening, got {type(opening).__name__}")
    if session_id is None:
        raise SpecError("session= needs a session_id: it describes the session a run opens")
    _metadata(opening.metadata)
    return opening


def _metadata(metadata: JsonObject) -> JsonObject:
    if not isinstance(metadata, dict):
        raise SpecError("session metadata must be a JSON object")
    size = json_size_or_none(metadata)
    if size is None:
        raise SpecError("session metadata must be JSON-serializable")
    if size > MAX_SESSION_METADATA_BYTES:
        raise TooLarge("session metadata", size, MAX_SESSION_METADATA_BYTES,
                       "MAX_SESSION_METADATA_BYTES")
    return metadata


def refuse_closed(tx: Tx, user_id: str | None, session_id: str) -> None:
    """:class:`SessionClosed` if the session exists and is closed (its row locked until
    the starting run's transaction ends, so a close and a start take turns)."""
    row = tx.lock_session(user_id, session_id)
    if row is not None and row.closed_at is not None:
        raise SessionClosed(user_id, session_id)


def close_session(store: EventStore, user_id: str | None, session_id: str, *,
                  reason: str | None = None) -> SessionRow | None:
    """Close the session (``session.closed``, once: closing a closed session records
    nothing); the session as it is now, None if there is no such session."""
    with store.transaction() as tx:
        row = tx.lock_session(user_id, session_id)
        if row is None:
            return None
        at = time.time()  # closed_at is the event's time: an import rebuilds it
        if tx.close_session(user_id, session_id, at=at):
            lifecycle.emit(tx, row.first_run_id, ev.SessionClosed(
                session_id=session_id, user_id=user_id, reason=reason), ts=at)
    return store.session(user_id, session_id)


def update_session(store: EventStore, user_id: str | None, session_id: str,
                   metadata: JsonObject) -> SessionRow | None:
    """Merge ``metadata`` into the session's (the caller wins, key by key;
    ``session.updated`` records the change); the session as it is now, None if there is
    no such session. A closed session is :class:`SessionClosed`; merged metadata past
    :data:`MAX_SESSION_METADATA_BYTES` is :class:`TooLarge` (nothing recorded)."""
    change = _metadata(metadata)
    with store.transaction() as tx:
        row = tx.lock_session(user_id, session_id)
        if row is None:
            return None
        if row.closed_at is not None:
            raise SessionClosed(user_id, session_id)
        _metadata({**row.metadata, **change})
        tx.merge_metadata(user_id, session_id, change)
        lifecycle.emit(tx, row.first_run_id, ev.SessionUpdated(
            session_id=session_id, user_id=user_id, metadata=change))
    return store.session(user_id, session_id)
