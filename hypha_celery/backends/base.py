"""``Backend``: the contract a conversational-agent provider implements (GenAgent
``Backend`` behaviour, §2.1), in Python.

Sessions are plain JSON dicts: the runtime stores them between turns and may hand them to
another worker process, so a backend keeps no live object in them (an id or a URL, not a
socket). Errors are :class:`BackendError` raised from ``start_session`` / ``prompt``
("nothing could be dispatched"); a failure after the stream started must be a terminal
``error`` event instead.

The stream returned by ``prompt`` is an iterator of :class:`BackendEvent` in order, ending with
exactly one terminal event (``result`` or ``error``); the runtime stops consuming there.
It may be lazy and may block; it is consumed in a worker thread or process. Stopping the
consumer does not cancel the provider's request: the runtime calls :meth:`Backend.cancel`
for that.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ClassVar, TypeAlias

from hypha_celery.backends.error import BackendError
from hypha_celery.backends.event import BackendEvent
from hypha_celery.jsontypes import JsonObject

if TYPE_CHECKING:
    from hypha_celery.backends.llm.client import BackendServices

#: A backend's session: its own JSON (an id, a URL, its options -- never a live object),
#: which the runtime stores between turns and hands to any worker. Each backend reads it
#: back (``isinstance`` checks or its own TypedDict); the runtime never looks inside.
Session: TypeAlias = JsonObject
# Acknowledges a provider session id mid-turn: the first id wins, a repeat is fine; an
# invalid, conflicting or stale id raises BackendError, which must fail the turn.
Checkpoint = Callable[[str], None]


class Backend(ABC):
    provider: ClassVar[str] = "backend"
    #: True (the default): the session ``prompt`` returns may record what the provider
    #: now holds (a CLI session the dispatch created), so the runtime stores it while the
    #: stream runs. False: it is only local history that the stored session plus the
    #: prompt rebuild; a turn whose worker dies mid-stream ends ``task_crashed`` with the
    #: session as it was before (one store write less per turn).
    durable_dispatch: ClassVar[bool] = True
    #: True: ``cancel()`` from another thread makes a ``prompt`` or a stream blocked on
    #: the provider return promptly (the hosted backends, through
    #: :mod:`~hypha_celery.backends.llm.cancel`); with ``durable_dispatch`` False the
    #: runtime then consumes the stream on the turn's own thread, the watchdog and
    #: interrupts reaching it through ``cancel``. False (the default): the stream runs on
    #: a thread of its own, which a stuck stream may keep while the turn moves on.
    cancel_unblocks: ClassVar[bool] = False

    @abstractmethod
    def start_session(self, opts: JsonObject) -> Session:
        """Once, when the agent starts. Returns a JSON-serializable session dict or raises
        :class:`BackendError` (the agent then fails to start)."""

    @abstractmethod
    def prompt(self, session: Session, prompt: str,
               checkpoint: Checkpoint | None = None) -> tuple[Iterator[BackendEvent], Session]:
        """Dispatch one prompt: ``(events, new_session)``, or raise :class:`BackendError`
        when nothing could be dispatched."""

    @abstractmethod
    def terminate_session(self, session: Session) -> None:
        """Cleanup; idempotent. Not called when a worker is killed abruptly."""

    def bind(self, services: BackendServices) -> None:
        """Receive what the runtime shares with backends (the rate limiter of model
        keys), before any session is started. The default ignores it."""
        return None

    def cancel(self) -> None:
        """Abort what ``prompt`` on this instance started: close the HTTP stream, kill the
        CLI's whole process group. Called from another thread (the watchdog, an interrupt,
        a cancel), possibly more than once and after the turn ended; must not raise. After
        it returns no provider work of this instance goes on. The default does nothing
        (a backend whose stream holds no external resource)."""
        return None

    def update_session(self, session: Session, result_data: JsonObject) -> Session:
        """Once per successful turn with the ``result`` event's data (e.g. a session id)."""
        return session

    def checkpoint_session(self, session: Session, session_id: str) -> Session:
        """Apply a session id acknowledged through ``checkpoint`` (optional)."""
        raise BackendError(self.provider, "unsupported_checkpoint", False)

    def reset_session(self, session: Session) -> Session:
        """Idle-only context reset (optional); the default is unsupported."""
        raise BackendError(self.provider, "unsupported", False)

    def resume_session(self, session_id: str, opts: JsonObject) -> Session:
        """Reserved: the core never calls it (kept for parity with GenAgent)."""
        raise NotImplementedError("resume_session is reserved; the runtime never calls it")
