"""The agent row as a typed doc, read and written in store transactions.

``AgentTx`` locks one agent's row (through :mod:`hypha_celery.store.agents`), gives its
doc as an :class:`~.doc.AgentDoc` to change, and on commit writes the doc, the phase
column and the agent's events (``hypha_events`` under the incarnation id, ``seq``
continuing the row's). Events carry no prompt text.

The backend session lives in a column of its own (:attr:`AgentDoc.session` to the code):
it is written only when it changed, so a transaction that moves a turn along rewrites the
small doc and not the session (a Mock session holds every script; a real one may be
large)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypha_celery import lanes
from hypha_celery.agents.doc import AgentDoc, Request
from hypha_celery.agents.runtime import new_token
from hypha_celery.errors import AgentNotFound, Overloaded
from hypha_celery.events.payloads import Payload
from hypha_celery.store import EventStore, Tx
from hypha_celery.store import agents as table

log = logging.getLogger(__name__)


def prompts_lane(incarnation: str) -> str:
    return f"a:{incarnation}:p"


def notifications_lane(incarnation: str) -> str:
    return f"a:{incarnation}:n"


class AgentTx:
    """One locked agent: its typed doc, the control and heartbeat columns, and the
    events and writes to flush when the transaction commits."""

    def __init__(self, tx: Tx, name: str, row: table.AgentRow) -> None:
        self.tx = tx
        self.name = name
        self.doc = AgentDoc.from_json(row.doc, row.session)
        self._session = row.session
        self.seq = row.seq
        self.control = row.control
        self.heartbeat_at = row.heartbeat_at
        self._events: list[table.AgentEvent] = []
        self._answers: list[tuple[str, dict[str, Any]]] = []
        self._control: Any = table.KEEP
        self.beat = False
        self.deleted = False

    @property
    def incarnation(self) -> str:
        return self.doc.incarnation

    def emit(self, payload: Payload) -> None:
        """Append the event ``payload`` (an ``agent.*`` payload model) at commit."""
        self.seq += 1
        self._events.append(table.AgentEvent(self.incarnation, self.seq, payload.kind,
                                             time.time(), payload.dump()))

    def answer(self, ref: str, outcome: dict[str, Any]) -> None:
        """Keep the outcome of ask ``ref`` for its asker (written at commit, with the row)."""
        self._answers.append((ref, outcome))

    def after_commit(self, fn: Callable[[], None]) -> None:
        self.tx.after_commit(fn)

    def before_commit(self, fn: Callable[[], None]) -> None:
        self.tx.before_commit(fn)

    def write_control(self, value: str | None) -> None:
        self.control = self._control = value

    def delete(self) -> None:
        self.deleted = True

    # -- the prompt lane (typed requests) -------------------------------------------
    def queued(self) -> list[Request]:
        """The queued prompts, oldest first (read, not taken)."""
        return [Request.from_json(i.payload)
                for i in lanes.items(self.tx, prompts_lane(self.incarnation))]

    def take_queued(self) -> list[Request]:
        """Take every queued prompt, oldest first."""
        return [Request.from_json(i.payload)
                for i in lanes.clear(self.tx, prompts_lane(self.incarnation))]

    def remove_queued(self, ref: str) -> None:
        lanes.remove(self.tx, prompts_lane(self.incarnation), ref)

    def queue(self, request: Request, bound: lanes.Bound) -> Overloaded | None:
        """Push ``request`` on the prompt lane; the overload (not raised) when it does not
        fit."""
        return overloaded(lanes.push(self.tx, prompts_lane(self.incarnation), request.ref,
                                     request.bytes, request.to_json(), bound=bound))

    def queued_count(self) -> int:
        return lanes.lock(self.tx, prompts_lane(self.incarnation)).pending_count

    def queue_event(self, event: Any) -> Overloaded | None:
        """Defer a notification (its lane, bounded); the overload (not raised) when it
        does not fit."""
        return overloaded(lanes.push(
            self.tx, notifications_lane(self.incarnation), new_token(), lanes.json_size(event),
            event, bound=self.doc.limits.notifications, queue="notifications"))

    def pop_next(self, prompt: bool) -> tuple[bool, Any, Request | None]:
        """Take the oldest deferred notification, else (with ``prompt``) the oldest
        queued prompt, in one statement: ``(True, event, None)``, ``(False, None,
        request)`` or ``(False, None, None)``."""
        event, queued = lanes.pop_first(self.tx, notifications_lane(self.incarnation),
                                        prompts_lane(self.incarnation) if prompt else None)
        if event is not None:
            return True, event.payload, None
        return False, None, None if queued is None else Request.from_json(queued.payload)

    def clear_notifications(self) -> None:
        lanes.clear(self.tx, notifications_lane(self.incarnation))

    def pending(self) -> tuple[int, int]:
        """(queued prompts, queued notifications)."""
        return (self.queued_count(),
                lanes.lock(self.tx, notifications_lane(self.incarnation)).pending_count)

    def drop_lanes(self) -> None:
        lanes.drop(self.tx, prompts_lane(self.incarnation))
        lanes.drop(self.tx, notifications_lane(self.incarnation))

    def flush(self) -> None:
        if self.deleted:
            for ref, outcome in self._answers:
                table.put_result(self.tx, self.incarnation, ref, outcome, 0, 0, 0,
                                 internal=True)
            table.append(self.tx, self._events)
            table.delete(self.tx, self.name, self.incarnation)
            return
        doc = self.doc
        session = _changed(doc.stored_session, self._session)
        table.update(self.tx, self.name, self.incarnation, doc.to_json(), doc.phase.value,
                     self.seq, session=session, control=self._control, beat=self.beat,
                     events=self._events, answers=self._answers)


def _changed(now: Any, read: table.StoredJson) -> Any:
    """The session to write: :data:`~hypha_celery.store.agents.KEEP` when it is still the
    column as read, or equal to the value read from it (compared only when that was
    parsed anyway)."""
    if now is read or (read.parsed and (now is read.value() or now == read.value())):
        return table.KEEP
    return now


def overloaded(info: dict[str, Any] | None) -> Overloaded | None:
    """A lane's refusal (GenAgent's overload info) as the error to raise or hand on."""
    return None if info is None else Overloaded(info)


@contextmanager
def locked(store: EventStore, name: str, incarnation: str | None = None
           ) -> Iterator[AgentTx]:
    """Lock agent ``name`` (of ``incarnation`` when given) for one transaction. Raises
    :class:`AgentNotFound` when there is no such live agent."""
    with store.transaction() as tx:
        row = table.lock(tx, name)
        if row is None or (incarnation is not None and row.doc["incarnation"] != incarnation):
            raise AgentNotFound(name)
        atx = AgentTx(tx, name, row)
        yield atx
        atx.flush()


def create(store: EventStore, doc: AgentDoc) -> bool:
    """Insert a new agent row (and its ``agent.started``); False when the name is taken."""
    return table.create(store, doc.name, doc.incarnation, doc.kind, doc.phase.value,
                        doc.to_json(), doc.session)


def read(store: EventStore, name: str) -> AgentDoc | None:
    """Agent ``name``'s doc, unlocked (a point in time)."""
    found = table.read(store, name)
    return None if found is None else AgentDoc.from_json(found, found["session"])


def stale(store: EventStore, before: float, limit: int) -> list[tuple[str, AgentDoc, float]]:
    """Busy agents whose owner has not beaten (or that nobody took) since ``before``:
    ``(name, doc without its session, last sign of life)``, oldest first. A row whose doc
    does not read as an agent's is skipped (logged): it must not stop the sweep of the
    others."""
    found: list[tuple[str, AgentDoc, float]] = []
    for name, doc, beat in table.stale(store, before, limit):
        try:
            found.append((name, AgentDoc.from_json(doc), beat))
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("hypha agents: row %r is not an agent doc (%s): skipped",
                        name, type(exc).__name__)
    return found


__all__ = ["AgentTx", "create", "locked", "notifications_lane", "overloaded", "prompts_lane",
           "read", "stale"]
