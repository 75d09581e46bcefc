"""Record evaluation's own events (``eval.*``, ``replay.*``, ``regression.*``) in a run's log.

The canonical-writer rule: the run lifecycle (``run.*``, ``node.*``, ``decision.*``, and the
runtime's ``recovery.*`` / ``agent.*`` streams) has exactly one writer, the runtime; this
recorder refuses those types. What it records is passive: the run projection (status,
state, result) does not change, only the run's ``seq`` moves on.

It sits in ``replay`` (below ``evaluation``, which re-exports it as
``hypha_celery.evaluation.record``) because both record through it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import cast

from hypha_celery.errors import NotRecordable
from hypha_celery.events.envelope import KINDS, Event, EventType, event_id
from hypha_celery.events.payloads import Payload
from hypha_celery.store import EventStore

#: Type prefixes only the runtime writes.
RESERVED_PREFIXES = ("run.", "node.", "decision.", "recovery.", "agent.")


def check_recordable(type_: str) -> None:
    """:class:`NotRecordable` unless ``type_`` is a known type outside the runtime's own."""
    if type_.startswith(RESERVED_PREFIXES):
        raise NotRecordable(f"{type_} is written by the runtime only (run.*, node.*, "
                            "decision.*, recovery.* and agent.* have one canonical writer)")
    if type_ not in KINDS:
        raise NotRecordable(f"unknown event type {type_!r}")


def record(store: EventStore, run_id: str, type_: str, payload: Mapping[str, object]) -> Event:
    """Append one event of ``type_`` to ``run_id``'s log (one transaction,
    :meth:`EventStore.append`) and return it. Raises :class:`NotRecordable` for a type the runtime
    owns and :class:`RunNotFound` for an unknown run."""
    check_recordable(type_)
    kind = cast(EventType, type_)  # check_recordable: a type of the taxonomy
    return _appended(store, run_id, kind, dict(payload))


def emit(store: EventStore, run_id: str, payload: Payload) -> Event:
    """:func:`record` the event ``payload`` (a payload model: its type, its JSON)."""
    check_recordable(payload.kind)
    return _appended(store, run_id, payload.kind, payload.dump())


def _appended(store: EventStore, run_id: str, kind: EventType, data: dict[str, object]
              ) -> Event:
    ts = time.time()
    seq = store.append(run_id, kind, data, ts=ts)
    return Event(id=event_id(run_id, seq), type=kind, run_id=run_id,
                 seq=seq, timestamp=ts, correlation_id=run_id, payload=data)
