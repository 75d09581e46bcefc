"""What a run records when it opens a session: :class:`SessionOpening`.

The first run started with a ``session_id`` opens the session ``(user_id, session_id)``:
its row and its ``session.created`` event are written in that run's transaction, with the
profile applied (a name, e.g. a pack's session profile) and the session's metadata. Later
runs of the session record nothing more. Metadata is bounded: at most
:data:`MAX_SESSION_METADATA_BYTES` of compact JSON (:class:`~hypha_celery.errors.TooLarge`
otherwise, nothing recorded).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypha_celery.errors import SpecError, TooLarge
from hypha_celery.graph.jsonsafe import json_size_or_none
from hypha_celery.jsontypes import JsonObject

__all__ = ["MAX_SESSION_METADATA_BYTES", "SessionOpening", "check_opening"]

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
    if not isinstance(opening.metadata, dict):
        raise SpecError("session metadata must be a JSON object")
    size = json_size_or_none(opening.metadata)
    if size is None:
        raise SpecError("session metadata must be JSON-serializable")
    if size > MAX_SESSION_METADATA_BYTES:
        raise TooLarge("session metadata", size, MAX_SESSION_METADATA_BYTES,
                       "MAX_SESSION_METADATA_BYTES")
    return opening
