""":class:`Bus`: publish, pull, acknowledge, fail — hypha's message bus on the event store.

The store is the truth: a message is a row of ``hypha_messages`` from ``publish`` on; a
broker or worker restart loses nothing (a wake-up task lost with the broker is only a
nudge: the next pull, or the recovery sweep, finds the row). Every transition is one
store transaction that also writes the ``message.*`` event to the log of the message's run
(a message with no run has no log: its row — status, reason, attempts, timestamps — is its
record)."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypha_celery.bus._model import (
    BusLimits,
    DeadLetterReason,
    Endpoint,
    EndpointKind,
    Message,
    MessageStatus,
    RetryPolicy,
    Scope,
    queue_key,
)
from hypha_celery.errors import (
    MessageAlreadyExists,
    MessageNotFound,
    MessageScopeMismatch,
    MessageTooLarge,
    NotRedrivable,
    QueueFull,
    RunNotFound,
    StoreConflict,
    UnknownRecipient,
)
from hypha_celery.events.payloads import (
    MessageAcknowledged,
    MessageDeadLettered,
    MessageDelivered,
    MessageEnqueued,
    MessageFailed,
    MessageRetrying,
)
from hypha_celery.store import EventStore, Tx
from hypha_celery.store import bus as rows

log = logging.getLogger(__name__)

#: Messages one :meth:`Bus.pull_many` delivers at most.
MAX_PULL = 500
#: Seconds between two looks for deliveries past their ack deadline, per queue and
#: process; queues remembered for it at most.
RECLAIM_EVERY_S = 1.0
RECLAIM_QUEUES = 10_000
#: Seconds between two pulls of :meth:`Bus.receive` (doubling up to the second value).
RECEIVE_POLL = (0.002, 0.05)

#: Called after a commit that made a message available to its recipient: the message and
#: the seconds until it is (a Celery wake-up task to the recipient's queue).
Waker = Callable[[Message, float], None]
#: A recipient kind's direct consumer: a message published to an idle queue of that kind
#: (nothing queued or in flight before it, available now) is delivered in the publishing
#: transaction and handed to it right after the commit, in the publisher's process, with
#: no wake-up hop. It settles the message later (acknowledge / fail); if it raises, or the
#: process dies first, the delivery's ack deadline passes and the message is delivered
#: again (at least once, as for any delivery).
Consumer = Callable[[Message], None]

_FACTS: dict[MessageStatus, type[MessageDelivered | MessageAcknowledged | MessageFailed
                                   | MessageDeadLettered]] = {
    MessageStatus.DELIVERED: MessageDelivered,
    MessageStatus.ACKNOWLEDGED: MessageAcknowledged,
    MessageStatus.FAILED: MessageFailed,
    MessageStatus.DEAD_LETTERED: MessageDeadLettered,
}


@dataclass(slots=True)
class _Batch:
    """The transitions of one transaction: row changes, queue counters, events."""

    changes: list[rows.Change] = field(default_factory=list)
    settled: dict[str, tuple[int, int]] = field(default_factory=dict)
    out: list[Message] = field(default_factory=list)
    retrying: dict[str, int] = field(default_factory=dict)  # message id -> delay ms


class Bus:
    """hypha's message bus between agents, workflows and humans.

    ``retry``: how ``fail(retry=True)`` requeues; ``limits``: every bound;
    ``clock``: seconds since the epoch (inject one in tests); ``wake``: called after a
    message became available (see :data:`Waker`)."""

    def __init__(self, store: EventStore, *, retry: RetryPolicy | None = None,
                 limits: BusLimits | None = None, clock: Callable[[], float] = time.time,
                 wake: Waker | None = None) -> None:
        self.store = store
        self.retry = retry or RetryPolicy()
        self.limits = limits or BusLimits()
        self.clock = clock
        self.wakers: list[Waker] = [wake] if wake is not None else []
        #: Direct consumers by recipient kind (see :data:`Consumer`).
        self.direct: dict[EndpointKind, Consumer] = {}
        self._reclaim: dict[str, float] = {}

    # -- publish --------------------------------------------------------------------
    def publish(self, message: Message) -> Message:
        """Queue ``message`` for ``message.to``; the stored message (``queued``).

        Raises :class:`MessageAlreadyExists`, :class:`MessageTooLarge`,
        :class:`QueueFull`, :class:`UnknownRecipient` (an agent that is not running, a
        workflow run that does not exist), :class:`RunNotFound` (``run_id``) and
        :class:`MessageScopeMismatch` (the run belongs to another user or session);
        nothing is recorded then."""
        return self.publish_many([message])[0]

    def publish_many(self, messages: Sequence[Message]) -> list[Message]:
        """:meth:`publish` several messages in one transaction (at most :data:`MAX_PULL`):
        all are queued, in the order given, or none (the first refusal is raised)."""
        if not 0 < len(messages) <= MAX_PULL:
            raise ValueError(f"publish_many takes 1 to {MAX_PULL} messages")
        return self._publish(messages, None)

    def answer(self, message_id: str, reply: Message) -> Message:
        """A consumer's answer: publish ``reply`` and acknowledge ``message_id`` in one
        transaction (both or neither: a consumer that dies before it never loses the
        reply nor acknowledges without it); the reply's wake-up or hand comes after the
        commit, when the message is settled. A settled ``message_id`` stays as it is.
        Raises as :meth:`publish`, and :class:`MessageNotFound`."""
        return self._publish([reply], message_id)[0]

    def _publish(self, messages: Sequence[Message], settle: str | None) -> list[Message]:
        now = self.clock()
        batch = [self._prepared(m, now) for m in messages]
        ids = [m.id for m, _ in batch]
        if len(set(ids)) != len(ids):
            raise MessageAlreadyExists("a message id is given twice")
        settled = _Batch()
        try:
            with self.store.transaction() as tx:
                if settle is not None:  # lock order: message rows, queue rows, run rows
                    [row] = self._locked(tx, [settle], None)
                    if not MessageStatus(row.status).terminal:
                        self._settle(settled, row, MessageStatus.ACKNOWLEDGED, now, None)
                live = self._admit(tx, batch, settled.settled)
                for msg, _ in batch:
                    self._check_run(tx, msg)
                for to in {msg.to for msg, _ in batch}:
                    _check_recipient(tx, to)
                handed = self._handed(batch, live, now)
                lease = now + self.limits.ack_deadline_s
                rows.insert(tx, [_new_row(msg, size, lease if msg.id in handed else None)
                                 for msg, size in batch])
                for msg, _ in batch:
                    _emit(tx, msg, MessageEnqueued)
                for delivered in handed.values():
                    _emit(tx, delivered, MessageDelivered)
                settled.settled.clear()  # counted out by _admit, in its one lock order
                self._write(tx, settled)
        except StoreConflict:  # a concurrent publish of the same id won the race
            raise MessageAlreadyExists(f"a message of {ids[:3]} exists") from None
        self._after_publish([msg for msg, _ in batch], handed, now)
        return [handed.get(msg.id, msg) for msg, _ in batch]

    def _handed(self, batch: Sequence[tuple[Message, int]], live: dict[str, int],
                now: float) -> dict[str, Message]:
        """The messages of ``batch`` this publish delivers itself (by id, delivered): to
        a recipient with a direct consumer, alone in its queue (nothing queued or in
        flight before it: FIFO holds), available now and not expired."""
        handed: dict[str, Message] = {}
        for msg, _ in batch:
            if msg.to.kind in self.direct and live[msg.queue] == 1 \
                    and msg.available_at <= now \
                    and (msg.expires_at is None or msg.expires_at > now):
                handed[msg.id] = msg.model_copy(update={
                    "status": MessageStatus.DELIVERED, "attempt_count": 1})
        return handed

    def _after_publish(self, published: Sequence[Message], handed: dict[str, Message],
                       now: float) -> None:
        """Hand the delivered messages to their direct consumers; wake the other queues
        (one wake-up per queue: its first message's delay)."""
        first: dict[str, Message] = {}
        for msg in published:
            if msg.id not in handed:
                first.setdefault(msg.queue, msg)
        for msg in first.values():
            self._wake(msg, max(0.0, msg.available_at - now))
        for msg in handed.values():
            try:
                self.direct[msg.to.kind](msg)
            except Exception as exc:  # published: its lease's end redelivers it
                log.warning("hypha bus: handing %s to %s failed (%s): redelivered after "
                            "its ack deadline", msg.id, msg.to, type(exc).__name__)

    def _prepared(self, message: Message, now: float) -> tuple[Message, int]:
        msg = message.model_copy(update={
            "status": MessageStatus.QUEUED, "created_at": now, "updated_at": now,
            "available_at": message.available_at or now, "attempt_count": 0,
            "reason": None})
        size = msg.size()
        if size > self.limits.max_message_bytes:
            raise MessageTooLarge("message", size, self.limits.max_message_bytes,
                                  "BusLimits.max_message_bytes")
        return msg, size

    def _admit(self, tx: Tx, batch: Sequence[tuple[Message, int]],
               leaving: dict[str, tuple[int, int]]) -> dict[str, int]:
        """Lock each queue of ``batch`` and of ``leaving`` (messages settled in this
        transaction: count and bytes by queue) in one order; count those out, check each
        incoming queue's bounds with the batch's messages, count them in; each incoming
        queue's live messages after."""
        incoming: dict[str, tuple[int, int]] = {}
        for msg, size in batch:
            n, b = incoming.get(msg.queue, (0, 0))
            incoming[msg.queue] = (n + 1, b + size)
        lim = self.limits
        live: dict[str, int] = {}
        for queue in sorted(incoming.keys() | leaving.keys()):
            if queue in leaving:
                rows.queue_add(tx, queue, -leaving[queue][0], -leaving[queue][1])
            if queue not in incoming:
                continue
            n, b = incoming[queue]
            count, nbytes = rows.queue_reserve(tx, queue, n, b)
            live[queue] = count
            if count > lim.max_queue_messages or nbytes > lim.max_queue_bytes:
                raise QueueFull({"queue": queue,
                                 "limit": "count" if count > lim.max_queue_messages
                                 else "bytes",
                                 "pending_count": count - n, "pending_bytes": nbytes - b,
                                 "incoming_bytes": b, "max_count": lim.max_queue_messages,
                                 "max_bytes": lim.max_queue_bytes})
        return live

    @staticmethod
    def _check_run(tx: Tx, msg: Message) -> None:
        if msg.run_id is None:
            return
        view = tx.lock(msg.run_id)
        if view is None:
            raise RunNotFound(f"no run {msg.run_id!r} in the event store")
        for name, ours in (("user_id", msg.user_id), ("session_id", msg.session_id)):
            theirs = view.get(name)
            if theirs is not None and theirs != ours:
                raise MessageScopeMismatch(
                    f"message {msg.id!r} has {name} {ours!r}; run {msg.run_id!r} has "
                    f"{theirs!r}")

    # -- pull -----------------------------------------------------------------------
    def pull(self, recipient: Endpoint, scope: Scope, *, run_id: str | None = None,
             fsm_state: str | None = None, correlation_id: str | None = None,
             ) -> Message | None:
        """The first message of ``recipient``'s queue in ``scope`` that is available,
        now ``delivered`` (its ``attempt_count`` one more), or None. Expired messages met on
        the way are dead-lettered (``expired``); messages not yet available are skipped;
        filters: the message's run, FSM state and correlation id."""
        found = self.pull_many(recipient, scope, 1, run_id=run_id, fsm_state=fsm_state,
                               correlation_id=correlation_id)
        return found[0] if found else None

    def pull_many(self, recipient: Endpoint, scope: Scope, limit: int, *,
                  run_id: str | None = None, fsm_state: str | None = None,
                  correlation_id: str | None = None) -> list[Message]:
        """:meth:`pull` up to ``limit`` (:data:`MAX_PULL`) messages in one transaction,
        in queue order."""
        limit = max(1, min(limit, MAX_PULL))
        queue = queue_key(scope, recipient)
        where = {"run_id": run_id, "fsm_state": fsm_state, "correlation_id": correlation_id}
        batch = _Batch()
        with self.store.transaction() as tx:
            now = self.clock()
            picked = rows.stale(tx, queue, now, limit, **where) \
                if self._reclaim_due(queue, now) else []
            taking = sum(self._takes(r, now) for r in picked)
            after = 0
            while taking < limit:  # expired rows met on the way do not count
                got = rows.head(tx, queue, now, limit - taking, after, **where)
                picked += got
                taking += sum(self._takes(r, now) for r in got)
                if not got or not any(_expired(r, now) for r in got):
                    break
                after = got[-1].pos
            for row in sorted(picked, key=lambda r: r.pos):
                self._deliver(batch, row, now)
            self._write(tx, batch)
        return [m for m in batch.out if m.status is MessageStatus.DELIVERED]

    def _reclaim_due(self, queue: str, now: float) -> bool:
        """Whether this pull looks for deliveries past their ack deadline (at most once a
        :data:`RECLAIM_EVERY_S` per queue and process: a round trip the common pull
        saves)."""
        if now < self._reclaim.get(queue, 0.0):
            return False
        if len(self._reclaim) >= RECLAIM_QUEUES:
            self._reclaim.clear()
        self._reclaim[queue] = now + RECLAIM_EVERY_S
        return True

    def _takes(self, row: rows.MessageRow, now: float) -> bool:
        """Whether a pull delivers ``row`` (not: expired, or its budget spent)."""
        if row.status == MessageStatus.DELIVERED:
            return row.attempt_count < self.retry.max_delivery_attempts
        return not _expired(row, now)

    def _deliver(self, batch: _Batch, row: rows.MessageRow, now: float) -> None:
        if row.status == MessageStatus.QUEUED and _expired(row, now):
            self._settle(batch, row, MessageStatus.DEAD_LETTERED, now,
                         DeadLetterReason.EXPIRED.value)
            return
        if row.status == MessageStatus.DELIVERED and \
                row.attempt_count >= self.retry.max_delivery_attempts:  # lease ran out
            self._settle(batch, row, MessageStatus.DEAD_LETTERED, now,
                         DeadLetterReason.BUDGET_EXHAUSTED.value)
            return
        change = rows.Change(row.pos, MessageStatus.DELIVERED.value, row.attempt_count + 1,
                             row.available_at, now + self.limits.ack_deadline_s, None, now)
        batch.changes.append(change)
        batch.out.append(_message(row, change))

    # -- acknowledge / fail -----------------------------------------------------------
    def acknowledge(self, message_id: str, *, scope: Scope | None = None) -> Message:
        """Settle the message ``acknowledged``. A message already settled is returned as
        it is, with no new event (terminal states are idempotent). Raises
        :class:`MessageNotFound` and :class:`MessageScopeMismatch` (``scope`` given and
        not the message's)."""
        return self.acknowledge_many([message_id], scope=scope)[0]

    def acknowledge_many(self, message_ids: Sequence[str], *,
                         scope: Scope | None = None) -> list[Message]:
        """:meth:`acknowledge` several messages in one transaction (in the order given)."""
        batch = _Batch()
        settled: list[Message] = []
        with self.store.transaction() as tx:
            now = self.clock()
            for row in self._locked(tx, message_ids, scope):
                if MessageStatus(row.status).terminal:
                    settled.append(_message(row))
                    continue
                self._settle(batch, row, MessageStatus.ACKNOWLEDGED, now, None)
                settled.append(batch.out[-1])
            self._write(tx, batch)
        return settled

    def fail(self, message_id: str, reason: str = "", *, retry: bool = False,
             dead_letter: bool = False, retry_after_ms: int | None = None,
             scope: Scope | None = None) -> Message:
        """A consumer could not handle the message. ``retry``: requeue it after
        ``retry_after_ms`` or the policy's backoff (``message.retrying``) while deliveries
        are left, else dead-letter it (``delivery_attempt_budget_exhausted``). Otherwise
        ``dead_letter`` (poison: reason ``poison`` unless given) or ``failed``. Either way
        the message leaves the queue's head: the next one is delivered. A settled message
        is returned unchanged, with no new event."""
        batch = _Batch()
        with self.store.transaction() as tx:
            now = self.clock()
            [row] = self._locked(tx, [message_id], scope)
            if MessageStatus(row.status).terminal:
                return _message(row)
            if retry:
                self._retry(batch, row, now, reason, retry_after_ms)
            elif dead_letter:
                self._settle(batch, row, MessageStatus.DEAD_LETTERED, now,
                             reason or DeadLetterReason.POISON.value)
            else:
                self._settle(batch, row, MessageStatus.FAILED, now, reason or None)
            self._write(tx, batch)
        msg = batch.out[0]
        if msg.id in batch.retrying:
            self._wake(msg, batch.retrying[msg.id] / 1000)
        return msg

    def extend(self, message_id: str, seconds: float) -> bool:
        """Keep a delivered message with its consumer ``seconds`` from now (its lease:
        no pull takes it again before); whether it was still delivered (settled or
        requeued: nothing to extend)."""
        if not seconds > 0:
            raise ValueError("a lease extension is a positive number of seconds")
        return rows.extend(self.store, message_id, self.clock() + seconds)

    def _retry(self, batch: _Batch, row: rows.MessageRow, now: float, reason: str,
               retry_after_ms: int | None) -> None:
        if row.attempt_count >= self.retry.max_delivery_attempts:
            self._settle(batch, row, MessageStatus.DEAD_LETTERED, now,
                         DeadLetterReason.BUDGET_EXHAUSTED.value)
            return
        delay = self.retry.delay_ms(max(row.attempt_count, 1)) if retry_after_ms is None \
            else max(0, int(retry_after_ms))
        change = rows.Change(row.pos, MessageStatus.QUEUED.value, row.attempt_count,
                             now + delay / 1000, None, reason or None, now)
        batch.changes.append(change)
        batch.out.append(_message(row, change))
        batch.retrying[row.doc["id"]] = delay

    def _locked(self, tx: Tx, message_ids: Sequence[str],
                scope: Scope | None) -> list[rows.MessageRow]:
        """Lock the messages (in queue order: one lock order), returned as given."""
        locked = {r.doc["id"]: r for r in rows.lock(tx, message_ids)}
        found = []
        for message_id in message_ids:
            row = locked.get(message_id)
            if row is None:
                raise MessageNotFound(f"no message {message_id!r}")
            if scope is not None and (row.doc["user_id"], row.doc["session_id"]) != (
                    scope.user_id, scope.session_id):
                raise MessageScopeMismatch(
                    f"message {message_id!r} is not in scope {scope.user_id}:"
                    f"{scope.session_id}")
            found.append(row)
        return found

    # -- the transaction's writes -------------------------------------------------------
    @staticmethod
    def _settle(batch: _Batch, row: rows.MessageRow, status: MessageStatus, now: float,
                reason: str | None) -> None:
        change = rows.Change(row.pos, status.value, row.attempt_count, row.available_at,
                             None, reason, now)
        batch.changes.append(change)
        batch.out.append(_message(row, change))
        count, nbytes = batch.settled.get(row.queue, (0, 0))
        batch.settled[row.queue] = (count + 1, nbytes + row.bytes)

    @staticmethod
    def _write(tx: Tx, batch: _Batch) -> None:
        rows.update(tx, batch.changes)
        for queue, (count, nbytes) in sorted(batch.settled.items()):
            rows.queue_add(tx, queue, -count, -nbytes)
        for run_id in sorted({m.run_id for m in batch.out if m.run_id is not None}):
            tx.lock(run_id)  # runs in one order: no deadlock between two batches
        for msg in batch.out:
            if msg.id in batch.retrying:
                _emit(tx, msg, MessageRetrying, reason=msg.reason,
                      delay_ms=batch.retrying[msg.id], available_at=msg.available_at)
            elif msg.status in (MessageStatus.FAILED, MessageStatus.DEAD_LETTERED):
                _emit(tx, msg, _FACTS[msg.status], reason=msg.reason)
            else:
                _emit(tx, msg, _FACTS[msg.status])

    # -- wake-ups -----------------------------------------------------------------------
    def _wake(self, msg: Message, delay: float) -> None:
        for wake in self.wakers:
            wake(msg, delay)

    # -- reads --------------------------------------------------------------------------
    def get(self, message_id: str) -> Message | None:
        row = rows.get(self.store, message_id)
        return None if row is None else _message(row)

    def messages(self, *, run_id: str | None = None, recipient: Endpoint | None = None,
                 scope: Scope | None = None, statuses: Iterable[MessageStatus] = (),
                 limit: int = 100) -> list[Message]:
        """Messages of a run, or of a recipient's queue in ``scope``, in queue order."""
        queue = None if recipient is None or scope is None else queue_key(scope, recipient)
        return [_message(r) for r in rows.listing(
            self.store, run_id=run_id, queue=queue, statuses=[s.value for s in statuses],
            limit=limit)]

    def receive(self, recipient: Endpoint, scope: Scope, *, timeout: float,
                run_id: str | None = None, fsm_state: str | None = None,
                correlation_id: str | None = None,
                cancelled: Callable[[], bool] = lambda: False) -> Message | None:
        """:meth:`pull` until a message comes or ``timeout`` seconds pass (polling the
        store, 2 ms doubling to 50 ms); None then."""
        end = time.monotonic() + timeout
        pause = RECEIVE_POLL[0]
        while True:
            msg = self.pull(recipient, scope, run_id=run_id, fsm_state=fsm_state,
                            correlation_id=correlation_id)
            if msg is not None or time.monotonic() >= end or cancelled():
                return msg
            time.sleep(min(pause, max(0.0, end - time.monotonic())))
            pause = min(pause * 2, RECEIVE_POLL[1])

    def prune(self, before: float, limit: int = 10_000) -> int:
        """Delete up to ``limit`` settled messages last changed before ``before``."""
        return rows.prune(self.store, before, limit)

    # -- operators' reads and redrive -------------------------------------------------------
    def search(self, *, run_id: str | None = None, user_id: str | None = None,
               session_id: str | None = None, to: Endpoint | None = None,
               statuses: Iterable[MessageStatus] = (), limit: int = 100) -> list[Message]:
        """The newest ``limit`` (1,000 at most) messages matching every filter given,
        newest first: a run's, a user's (and one session's: ``session_id`` needs
        ``user_id``), a recipient's in any scope, in ``statuses``."""
        if session_id is not None and user_id is None:
            raise ValueError("session_id needs user_id")
        scope = None if user_id is None or session_id is None else Scope(user_id, session_id)
        query = rows.MessageQuery(
            run_id=run_id, user_id=user_id, to_kind=None if to is None else to.kind.value,
            queue=None if scope is None or to is None else queue_key(scope, to),
            queue_prefix=None if scope is None else f"{user_id}:{session_id}:",
            queue_suffix=None if to is None else f":{to.kind.value}:{to.id}",
            statuses=tuple(s.value for s in statuses))
        return [_message(r) for r in rows.search(self.store, query, limit)]

    def redrive(self, message_id: str, *, scope: Scope | None = None) -> Message:
        """Publish a dead-lettered message again as a new message: its id derived from the
        dead letter's (a second redrive returns the same copy), available now, no expiry,
        ``metadata["redriven_from"]`` the dead letter's id. The dead letter stays as its
        record. Raises :class:`MessageNotFound`, :class:`MessageScopeMismatch`,
        :class:`NotRedrivable` (not dead-lettered) and what :meth:`publish` raises."""
        msg = self.get(message_id)
        if msg is None:
            raise MessageNotFound(f"no message {message_id!r}")
        if scope is not None and msg.scope != scope:
            raise MessageScopeMismatch(f"message {message_id!r} is not in scope "
                                       f"{scope.user_id}:{scope.session_id}")
        if msg.status is not MessageStatus.DEAD_LETTERED:
            raise NotRedrivable(f"message {message_id!r} is {msg.status.value}, not "
                                "dead-lettered")
        copy = msg.model_copy(update={
            "id": "rd-" + hashlib.sha256(msg.id.encode()).hexdigest()[:40],
            "available_at": 0.0, "expires_at": None,
            "metadata": {**msg.metadata, "redriven_from": msg.id}})
        try:
            return self.publish(copy)
        except MessageAlreadyExists:
            found = self.get(copy.id)
            if found is None:  # redriven, then pruned: not this one's to redo
                raise
            return found


def _expired(row: rows.MessageRow, now: float) -> bool:
    return row.expires_at is not None and row.expires_at <= now


def _new_row(msg: Message, size: int, lease_until: float | None) -> rows.NewMessage:
    """The row of ``msg``: queued, or delivered until ``lease_until``."""
    return rows.NewMessage(msg.id, msg.queue, msg.to.kind.value, msg.user_id, msg.run_id,
                           msg.fsm_state, msg.correlation_id, msg.available_at,
                           msg.expires_at, size, msg.created_at, msg.doc(), lease_until)


def _message(row: rows.MessageRow, change: rows.Change | None = None) -> Message:
    """The message of ``row`` (after ``change``)."""
    msg = Message.model_validate(row.doc)
    if change is None:
        return msg.model_copy(update={
            "status": MessageStatus(row.status), "attempt_count": row.attempt_count,
            "available_at": row.available_at, "updated_at": row.updated_at,
            "reason": row.reason})
    return msg.model_copy(update={
        "status": MessageStatus(change.status), "attempt_count": change.attempt_count,
        "available_at": change.available_at, "updated_at": change.updated_at,
        "reason": change.reason})


def _check_recipient(tx: Tx, to: Endpoint) -> None:
    if to.kind is EndpointKind.AGENT and not rows.agent_exists(tx, to.id):
        raise UnknownRecipient(f"no running agent {to.id!r}")
    if to.kind is EndpointKind.WORKFLOW and not rows.run_exists(tx, to.id):
        raise UnknownRecipient(f"no workflow run {to.id!r}")


def _emit(tx: Tx, msg: Message, model: type[Any], **extra: Any) -> None:
    """Write ``model``'s event for ``msg`` to its run's log (none for a message of no
    run: its row is the record)."""
    if msg.run_id is None or tx.lock(msg.run_id) is None:
        return
    tx.emit(msg.run_id, model(
        message_id=msg.id, type=msg.type, queue=msg.queue, from_=msg.from_.model_dump(
            mode="json"), to=msg.to.model_dump(mode="json"), status=msg.status.value,
        attempt=msg.attempt_count, correlation_id=msg.correlation_id,
        causation_id=msg.causation_id, fsm_state=msg.fsm_state, **extra))
