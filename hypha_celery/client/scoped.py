"""``ScopedHypha``: a client bound to a principal.

Scoping lives at the store boundary: a user's client reads through
:meth:`EventStore.scoped`, whose every read, lock, export and dead-letter query is
narrowed to that user's runs. What another user owns is, to this client, what does not
exist: the same :class:`RunNotFound` / :class:`NotRedrivable` / :class:`AgentNotFound`
with the same message, so nothing says whether it exists. Agents are scoped by name
(:mod:`hypha_celery.agents.scoped`), bus messages by user (:mod:`.scoped_bus`), memory
by user (:mod:`.memory`).

An admin principal reads through the unscoped store and is named (``by``) in the reviews
it decides. Operations on the whole deployment (a supervisor sweep) need an admin:
:class:`NotPermitted` for a user.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from celery.canvas import Signature

from hypha_celery.agents.api import Agents
from hypha_celery.agents.scoped import ScopedAgents
from hypha_celery.bus import Bus
from hypha_celery.client.memory import ScopedMemory
from hypha_celery.client.run import RunHandle
from hypha_celery.client.scoped_bus import ScopedBus
from hypha_celery.client.sessions import SessionOpening, close_session
from hypha_celery.errors import NotPermitted, NotRedrivable, RunNotFound
from hypha_celery.graph import Graph
from hypha_celery.live import LiveBus
from hypha_celery.memory import MemoryManager
from hypha_celery.principals import Principal
from hypha_celery.reviews import PendingReview
from hypha_celery.reviews import pending as pending_reviews
from hypha_celery.runtime.config import Settings
from hypha_celery.runtime.core import SweepDecision
from hypha_celery.runtime.notifier import Notifier
from hypha_celery.store import EventStore, RunFilter, RunRow, SessionRow
from hypha_celery.store.recovery import DeadLetterRow

if TYPE_CHECKING:
    from hypha_celery.client.hypha import Hypha

__all__ = ["ScopedHypha"]


class ScopedHypha:
    """``hypha.as_user("alice")`` / ``hypha.as_principal(Principal.admin("ops"))``.

    Shares the ``Hypha``'s app, store engines, workers and buses: make as many as there
    are requests; :meth:`close` closes nothing (the ``Hypha`` owns it all)."""

    def __init__(self, hypha: Hypha, principal: Principal) -> None:
        self._hypha = hypha
        self.principal = principal
        owner = principal.owner
        #: The store as this principal sees it.
        self.store: EventStore = hypha.store if owner is None else hypha.store.scoped(owner)
        self.agents: Agents | ScopedAgents = hypha.agents if owner is None else \
            ScopedAgents(hypha.agents, owner, hypha.settings.max_agents_per_owner)
        #: The message bus as this principal sees it (a user: its messages and agents).
        self.bus: Bus | ScopedBus = hypha.bus if owner is None else \
            ScopedBus(hypha.bus, self.store, owner)
        #: Governed memory as this principal sees it (a user: its own only).
        self.memory: MemoryManager | ScopedMemory = hypha.memory if owner is None else \
            ScopedMemory(MemoryManager(self.store, policy=hypha.memory.policy,
                                       limits=hypha.memory.limits), owner)

    def __repr__(self) -> str:
        return f"ScopedHypha({self.principal})"

    @property
    def settings(self) -> Settings:
        return self._hypha.settings

    @property
    def live(self) -> LiveBus:
        return self._hypha.live

    @property
    def notifier(self) -> Notifier:
        return self._hypha.notifier

    @property
    def graphs(self) -> dict[str, Graph]:
        return self._hypha.graphs

    # -- runs -------------------------------------------------------------------------
    def start(self, graph: Graph | str, input: Any = None, *, user_id: str | None = None,
              session_id: str | None = None, notify: Signature | None = None,
              on_busy: Literal["queue", "reject"] = "queue",
              idempotency_key: str | None = None,
              session: SessionOpening | None = None) -> RunHandle:
        """:meth:`Hypha.start` as this principal: a user's runs carry its user id (another
        ``user_id`` is :class:`NotPermitted`) and its idempotency keys are its own; an
        admin starts runs for any ``user_id``."""
        owner = self.principal.owner
        if owner is not None:
            if user_id not in (None, owner):
                raise NotPermitted("a user's client starts runs for that user only")
            user_id = owner
            if idempotency_key is not None:
                idempotency_key = f"{owner}/{idempotency_key}"
        handle = self._hypha.start(graph, input, user_id=user_id, session_id=session_id,
                                   notify=notify, on_busy=on_busy,
                                   idempotency_key=idempotency_key, session=session)
        return RunHandle(self, handle.id)

    def get_run(self, run_id: str) -> RunHandle:
        if self.store.load(run_id) is None:
            raise RunNotFound(f"no run {run_id!r} in the event store")
        return RunHandle(self, run_id)

    def cancel(self, run_id: str) -> bool:
        return self._hypha.cancel_in(self.store, run_id)

    def runs(self, *, status: str | None = None, limit: int = 100) -> list[str]:
        """Ids of this principal's newest runs (in ``status``), newest first."""
        return self.store.run_ids(status=status, limit=limit)

    def list_runs(self, filters: RunFilter | None = None, *, limit: int = 50,
                  before: int | None = None) -> list[RunRow]:
        """This principal's runs matching ``filters`` (graph, status, user, session,
        created / updated times), newest first, content-free: a page of at most ``limit``;
        the next page is ``before=page[-1].id`` (:meth:`EventStore.list_runs`)."""
        return self.store.list_runs(filters, limit=limit, before=before)

    def session_runs(self, session_id: str, user_id: str | None = None) -> list[str]:
        """Ids of the runs of one session of this user (an admin names the user)."""
        owner = self.principal.owner
        user = owner if owner is not None else user_id
        if user is None:
            raise NotPermitted("an admin names the user of a session (user_id=...)")
        return self.store.session_runs(user, session_id)

    def sessions(self, *, user_id: str | None = None, limit: int = 50) -> list[SessionRow]:
        """This principal's sessions, newest first (an admin may name a user)."""
        return self.store.sessions(user_id=user_id, limit=limit)

    def session(self, session_id: str, user_id: str | None = None) -> SessionRow | None:
        """One session of this user (an admin names the user; None: no such session)."""
        owner = self.principal.owner
        return self.store.session(owner if owner is not None else user_id, session_id)

    def close_session(self, session_id: str, user_id: str | None = None, *,
                      reason: str | None = None) -> SessionRow | None:
        """Close one session of this user (an admin names the user; None: no such
        session): ``session.closed``, once."""
        owner = self.principal.owner
        return close_session(self.store, owner if owner is not None else user_id,
                             session_id, reason=reason)

    # -- reviews ----------------------------------------------------------------------
    def reviews(self, limit: int = 100) -> list[PendingReview]:
        """This principal's runs waiting for a person, oldest first."""
        return pending_reviews(self.store, limit)

    def approve(self, run_id: str, *, by: str | None = None, note: str = "",
                review_id: str | None = None) -> str:
        """:meth:`Hypha.approve` on a run of this principal's, decided by it."""
        self.get_run(run_id)
        return self._hypha.approve(run_id, by=self._by(by), note=note, review_id=review_id)

    def reject(self, run_id: str, *, reason: str, by: str | None = None,
               review_id: str | None = None) -> str:
        self.get_run(run_id)
        return self._hypha.reject(run_id, by=self._by(by), reason=reason, review_id=review_id)

    def _by(self, by: str | None) -> str:
        """Who decides: the principal itself (a user cannot sign as someone else)."""
        if by not in (None, self.principal.id) and not self.principal.is_admin:
            raise NotPermitted("a user's client decides reviews as that user only")
        return by or self.principal.id

    # -- dead letters and quarantine ---------------------------------------------------
    def dead_letters(self, *, status: str | None = "open", limit: int = 100
                     ) -> list[DeadLetterRow]:
        """Dead letters of this principal's runs, newest first (``status=None``: all)."""
        return self.store.dead_letters(status=status, limit=limit)

    def redrive(self, dead_letter_id: int) -> str:
        """:meth:`Hypha.redrive` of a dead letter of this principal's runs; the run's
        event names the principal."""
        if self.store.dead_letter(dead_letter_id) is None:
            raise NotRedrivable(f"no dead letter {dead_letter_id}")
        return self._hypha.redrive(dead_letter_id, by=self.principal.id)

    def release(self, run_id: str) -> None:
        self.get_run(run_id)
        self._hypha.release(run_id, by=self.principal.id)

    def fail_quarantined(self, run_id: str, message: str = "failed by an operator") -> None:
        self.get_run(run_id)
        self._hypha.fail_quarantined(run_id, message, by=self.principal.id)

    def sweep(self) -> list[SweepDecision]:
        """A supervisor sweep covers every run: an admin's only."""
        self._admin("a sweep")
        return self._hypha.sweep()

    def _admin(self, what: str) -> None:
        if not self.principal.is_admin:
            raise NotPermitted(f"{what} needs an admin principal")

    def close(self) -> None:
        """Nothing to close: the ``Hypha`` owns the app, the store and the buses."""
