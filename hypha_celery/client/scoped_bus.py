"""``ScopedBus``: the message bus as one user's client sees it (``hypha.as_user(u).bus``).

Every message it publishes carries that user's ``user_id`` (another is
:class:`MessageScopeMismatch`, nothing recorded); every pull, receive and listing names a
scope or filter of that user (another user's scope: :class:`MessageScopeMismatch`); an id
of another user's message answers exactly as an id nobody has (``get``: None; acknowledge,
fail, redrive: the same :class:`MessageNotFound`). A run or workflow recipient of another
user's is, as for the rest of the scoped client, a run that does not exist.

Agent endpoints name this user's agents, as :class:`~hypha_celery.agents.scoped.
ScopedAgents` does: ``agent:helper`` is the user's agent ``helper`` (stored
``<user id>/helper``) both ways, so a user's prompts never reach another user's agents.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from hypha_celery.bus import (
    Bus,
    Endpoint,
    EndpointKind,
    Message,
    MessageNotFound,
    MessageScopeMismatch,
    MessageStatus,
    Scope,
    UnknownRecipient,
)
from hypha_celery.errors import NotPermitted, RunNotFound
from hypha_celery.store import EventStore

__all__ = ["ScopedBus"]


class ScopedBus:
    """The :class:`~hypha_celery.bus.Bus` calls, on one user's messages only. ``store``:
    the user's scoped store (what runs it sees)."""

    def __init__(self, bus: Bus, store: EventStore, owner: str) -> None:
        self._bus = bus
        self._store = store
        self.owner = owner
        self._prefix = owner + "/"  # a user's agent names (ScopedAgents)

    # -- endpoints: this user's agents ------------------------------------------------------
    def _stored(self, ep: Endpoint) -> Endpoint:
        if ep.kind is not EndpointKind.AGENT:
            return ep
        return Endpoint(kind=ep.kind, id=self._prefix + ep.id)

    def _shown(self, ep: Endpoint) -> Endpoint:
        if ep.kind is not EndpointKind.AGENT or not ep.id.startswith(self._prefix):
            return ep
        return Endpoint(kind=ep.kind, id=ep.id.removeprefix(self._prefix))

    def _map(self, msg: Message, to: Callable[[Endpoint], Endpoint]) -> Message:
        return msg.model_copy(update={
            "from_": to(msg.from_), "to": to(msg.to),
            "reply_to": None if msg.reply_to is None else to(msg.reply_to),
            "route": tuple(to(ep) for ep in msg.route)})

    def _out(self, msg: Message) -> Message:
        return self._map(msg, self._shown)

    # -- scope ------------------------------------------------------------------------------
    def _check_user(self, user_id: str, what: str) -> None:
        if user_id != self.owner:
            raise MessageScopeMismatch(f"{what} has user_id {user_id!r}: this client is "
                                       f"user {self.owner!r}'s")

    def _own(self, message_id: str) -> Message:
        """This user's message by id (another user's: as if there were none)."""
        msg = self._bus.get(message_id)
        if msg is None or msg.user_id != self.owner:
            raise MessageNotFound(f"no message {message_id!r}")
        return msg

    def _admitted(self, message: Message) -> Message:
        self._check_user(message.user_id, f"message {message.id!r}")
        if message.run_id is not None and self._store.load(message.run_id) is None:
            raise RunNotFound(f"no run {message.run_id!r} in the event store")
        if message.to.kind is EndpointKind.WORKFLOW and self._store.load(message.to.id) is None:
            raise UnknownRecipient(f"no workflow run {message.to.id!r}")
        return self._map(message, self._stored)

    # -- publish ----------------------------------------------------------------------------
    def publish(self, message: Message) -> Message:
        """:meth:`Bus.publish` of a message of this user's."""
        return self.publish_many([message])[0]

    def publish_many(self, messages: Sequence[Message]) -> list[Message]:
        return [self._out(m) for m in
                self._bus.publish_many([self._admitted(m) for m in messages])]

    # -- pull -------------------------------------------------------------------------------
    def pull(self, recipient: Endpoint, scope: Scope, *, run_id: str | None = None,
             fsm_state: str | None = None, correlation_id: str | None = None,
             ) -> Message | None:
        found = self.pull_many(recipient, scope, 1, run_id=run_id, fsm_state=fsm_state,
                               correlation_id=correlation_id)
        return found[0] if found else None

    def pull_many(self, recipient: Endpoint, scope: Scope, limit: int, *,
                  run_id: str | None = None, fsm_state: str | None = None,
                  correlation_id: str | None = None) -> list[Message]:
        self._check_user(scope.user_id, "the scope")
        return [self._out(m) for m in self._bus.pull_many(
            self._stored(recipient), scope, limit, run_id=run_id, fsm_state=fsm_state,
            correlation_id=correlation_id)]

    def receive(self, recipient: Endpoint, scope: Scope, *, timeout: float,
                run_id: str | None = None, fsm_state: str | None = None,
                correlation_id: str | None = None,
                cancelled: Callable[[], bool] = lambda: False) -> Message | None:
        self._check_user(scope.user_id, "the scope")
        msg = self._bus.receive(self._stored(recipient), scope, timeout=timeout,
                                run_id=run_id, fsm_state=fsm_state,
                                correlation_id=correlation_id, cancelled=cancelled)
        return None if msg is None else self._out(msg)

    # -- settle -----------------------------------------------------------------------------
    def acknowledge(self, message_id: str, *, scope: Scope | None = None) -> Message:
        return self.acknowledge_many([message_id], scope=scope)[0]

    def acknowledge_many(self, message_ids: Sequence[str], *,
                         scope: Scope | None = None) -> list[Message]:
        for message_id in message_ids:
            self._own(message_id)
        return [self._out(m) for m in self._bus.acknowledge_many(message_ids, scope=scope)]

    def fail(self, message_id: str, reason: str = "", *, retry: bool = False,
             dead_letter: bool = False, retry_after_ms: int | None = None,
             scope: Scope | None = None) -> Message:
        self._own(message_id)
        return self._out(self._bus.fail(message_id, reason, retry=retry,
                                         dead_letter=dead_letter,
                                         retry_after_ms=retry_after_ms, scope=scope))

    def redrive(self, message_id: str) -> Message:
        """:meth:`Bus.redrive` of a dead letter of this user's."""
        return self._out(self._bus.redrive(self._own(message_id).id))

    # -- reads ------------------------------------------------------------------------------
    def get(self, message_id: str) -> Message | None:
        msg = self._bus.get(message_id)
        return None if msg is None or msg.user_id != self.owner else self._out(msg)

    def messages(self, *, run_id: str | None = None, recipient: Endpoint | None = None,
                 scope: Scope | None = None, statuses: Iterable[MessageStatus] = (),
                 limit: int = 100) -> list[Message]:
        """This user's messages of a run, or of a recipient's queue in ``scope``: the
        newest ``limit``, in queue order."""
        if scope is not None:
            self._check_user(scope.user_id, "the scope")
        found = self.search(run_id=run_id, session_id=None if scope is None
                            else scope.session_id, to=None if scope is None else recipient,
                            statuses=statuses, limit=limit)
        return found[::-1]

    def search(self, *, run_id: str | None = None, user_id: str | None = None,
               session_id: str | None = None, to: Endpoint | None = None,
               statuses: Iterable[MessageStatus] = (), limit: int = 100) -> list[Message]:
        """:meth:`Bus.search` within this user's messages (newest first)."""
        if user_id is not None:
            self._check_user(user_id, "the filter")
        return [self._out(m) for m in self._bus.search(
            run_id=run_id, user_id=self.owner, session_id=session_id,
            to=None if to is None else self._stored(to), statuses=statuses, limit=limit)]

    def prune(self, before: float, limit: int = 10_000) -> int:
        """Pruning covers every user's messages: an admin's (the supervisor's) only."""
        raise NotPermitted("pruning the bus acts on the whole deployment: an admin's")
