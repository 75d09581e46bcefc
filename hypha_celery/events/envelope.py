"""The event envelope stored in the log and written to JSONL exports.

Event types are :mod:`hypha_celery.events.kinds`'s taxonomy; each has one payload model
(:mod:`hypha_celery.events.payloads`, what :attr:`Event.body` gives). The store keeps
``run_id``, ``seq``, ``type``, ``timestamp``, ``payload`` and the idempotency key; every
other envelope field is a pure function of a run's events and its row (:func:`enrich`):

* ``id`` — ``"<run_id>:<seq>"``, unique and stable (an import of the same event is a no-op);
* ``user_id`` / ``session_id`` / ``agent_id`` — the run's owner and its graph (or agent);
* ``execution_id`` / ``step_id`` — the node execution and the step it belongs to;
* ``correlation_id`` — what pairs a lifecycle: the execution id for node events, the call
  id for model / tool calls, the review id for human review, else the run id;
* ``causation_id`` — the id of the event that caused this one (a schedule's decision, an
  outcome's schedule, a terminal event's last decision), when there is one;
* ``checksum`` — ``sha256:<hex>`` of the canonical JSON of the other fields (JSONL exports
  carry it so a changed line is detected on import).
"""

from __future__ import annotations

import builtins
import hashlib
import json
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from hypha_celery.events.jsontext import prebuilt
from hypha_celery.events.kinds import (
    AGENT_KINDS,
    KINDS,
    META_PREFIXES,
    TERMINAL_KINDS,
    EventType,
    Kind,
    as_kind,
)
from hypha_celery.events.payloads import P, Payload, payload_as, payload_of

__all__ = ["AGENT_KINDS", "KINDS", "META_PREFIXES", "TERMINAL_KINDS", "Event", "EventType",
           "Kind", "Row", "as_kind", "bodies", "canonical", "checksum", "derive", "derived_alone",
           "deriver", "enrich", "event_id"]


class Event(BaseModel):
    """One fact about one run (or agent incarnation). ``seq`` is unique and gap-free per
    run. ``kind`` / ``data`` / ``ts`` are the short names the runtime uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = ""
    type: EventType
    run_id: str
    seq: int
    timestamp: float
    user_id: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    step_id: str | None = None
    execution_id: str | None = None
    correlation_id: str | None = None
    causation_id: str | None = None
    idempotency_key: str | None = None
    payload: dict[str, Any]
    checksum: str | None = None

    @property
    def kind(self) -> str:
        return self.type

    @property
    def data(self) -> dict[str, Any]:
        return self.payload

    @property
    def ts(self) -> float:
        return self.timestamp

    @property
    def body(self) -> Payload:
        """The payload as its type's model (:func:`~hypha_celery.events.payloads.
        payload_of`): ``match event.body: case RunFailed(reason=r): ...``."""
        return payload_of(self.type, self.payload)

    def body_as(self, model: builtins.type[P]) -> P:
        """The payload as ``model``, this event's type's model
        (:class:`~hypha_celery.errors.UnknownEventKind` when it is another's)."""
        return payload_as(model, self.type, self.payload)

    def sealed(self) -> Event:
        """This event with its ``checksum`` set."""
        return self.model_copy(update={"checksum": checksum(self)})


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                              allow_nan=False)
_canonical = prebuilt(_CANONICAL)


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, finite numbers only, ASCII (\\u escapes: a
    lone surrogate in a payload still encodes)."""
    try:
        return _canonical(value)
    except RecursionError:  # a cycle: the encoder's own error (ValueError)
        return _CANONICAL.encode(value)


def checksum(event: Event) -> str:
    body = event.model_dump(exclude={"checksum"})
    return "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()


def event_id(run_id: str, seq: int) -> str:
    return f"{run_id}:{seq}"


# How each event type's correlation and causation come (see :func:`derive`), from its
# name: correlation by the payload's call id / review id, else the execution or run id ...
_BY_EXECUTION, _BY_CALL, _BY_REVIEW = 0, 1, 2
# ... and the event that caused it (the last run.created / decision.policy.recorded, the
# schedule or start of the same correlation id), and what it records for later events.
(_NO_CAUSE, _CREATED, _AFTER_CREATED, _SCHEDULED, _DECISION, _STARTED, _FOLLOWS,
 _RUN_EVENT) = range(8)


def _modes(type_: str) -> tuple[int, int]:
    """``(correlation, causation)`` rule of an event type."""
    if type_.startswith(("model.call.", "tool.call.", "tool.policy.")):
        correlation = _BY_CALL
    elif type_.startswith("human.review."):
        correlation = _BY_REVIEW
    else:
        correlation = _BY_EXECUTION
    if type_ == "run.created":
        cause = _CREATED
    elif type_ in ("run.started", "run.queued"):
        cause = _AFTER_CREATED
    elif type_ in ("node.execution.scheduled", "node.fanout.scheduled"):
        cause = _SCHEDULED
    elif type_ == "decision.policy.recorded":
        cause = _DECISION
    elif type_.endswith((".started", ".requested")):
        cause = _STARTED
    elif type_.startswith(("node.", "model.call.", "tool.", "human.review.")):
        cause = _FOLLOWS
    elif type_.startswith("run."):
        cause = _RUN_EVENT
    else:
        cause = _NO_CAUSE
    return correlation, cause


_MODES = {kind: _modes(kind) for kind in KINDS}


class _Causes:
    """Tracks, in one pass over a run's events, which earlier event caused each one."""

    def __init__(self) -> None:
        self.created: str | None = None
        self.decision: str | None = None
        self.scheduled: dict[str, str] = {}
        self.started: dict[str, str] = {}

    def of(self, rule: int, eid: str, correlation: str) -> str | None:
        """The cause of event ``eid`` whose type has causation ``rule``."""
        if rule == _FOLLOWS:
            return self.started.get(correlation) or self.scheduled.get(correlation)
        if rule == _STARTED:
            self.started[correlation] = eid
            return self.scheduled.get(correlation) or self.decision
        if rule == _DECISION:
            self.decision = eid
        elif rule == _SCHEDULED:
            self.scheduled[correlation] = eid
            return self.decision
        elif rule == _CREATED:
            self.created = eid
        elif rule == _AFTER_CREATED:
            return self.created
        elif rule == _RUN_EVENT:
            return self.decision or self.created
        return None


#: Envelope fields the store does not keep: :func:`derive` computes them.
DERIVED_FIELDS = ("id", "user_id", "session_id", "agent_id", "step_id", "execution_id",
                  "correlation_id", "causation_id")
#: A stored event: ``(run_id, seq, type, ts, payload, idem)``.
Row = tuple[str, int, str, float, dict[str, object], str | None]


def derive(rows: Iterable[Row], run: Mapping[str, Any] | None = None,
           ) -> Iterator[tuple[Any, ...]]:
    """The :data:`DERIVED_FIELDS` of each of one run's stored rows, in ``seq`` order;
    ``run`` gives ``user_id``, ``session_id`` and ``graph_id``.

    * ``id``: ``<run_id>:<seq>``; ``agent_id``: the run's graph, else the payload's ``name``;
    * ``execution_id``: the payload's; ``step_id``: the payload's ``step``, else the
      number after the execution id's first dot;
    * ``correlation_id``: the payload's ``call_id`` (model / tool calls, tool policy) or
      ``review_id`` (human review) when set, else the execution id, else the run id;
    * ``causation_id``: ``run.started`` / ``run.queued``: ``run.created``; a schedule: the
      last decision; a ``*.started`` / ``*.requested``: the schedule of its correlation id,
      else the last decision; any other ``node.`` / ``model.call.`` / ``tool.`` /
      ``human.review.`` event: the start, else the schedule, of its correlation id; any
      other ``run.`` event: the last decision, else ``run.created``.
    """
    return map(deriver(run), rows)


def deriver(run: Mapping[str, Any] | None = None) -> Callable[[Row], tuple[Any, ...]]:
    """:func:`derive` a row at a time: a function that, called with each of one run's
    rows in ``seq`` order, returns its :data:`DERIVED_FIELDS`."""
    steps = _derive_steps(run or {})
    next(steps)
    return steps.send


def _derive_steps(run: Mapping[str, Any]) -> Generator[tuple[Any, ...], Row, None]:
    user_id, session_id, graph_id = run.get("user_id"), run.get("session_id"), run.get("graph_id")
    cause = _Causes().of
    modes = _MODES
    derived: tuple[Any, ...] = ()
    while True:
        run_id, seq, type_, _ts, payload, _idem = yield derived
        execution_id = payload.get("execution_id")
        if execution_id is not None:
            execution_id = str(execution_id)
        eid = f"{run_id}:{seq}"
        by, rule = modes.get(type_) or _modes(type_)
        correlation = execution_id or run_id
        if by:
            key = payload.get("call_id" if by == _BY_CALL else "review_id")
            if key:
                correlation = str(key)
        step = payload.get("step")
        if step is not None:
            step = str(step)
        elif execution_id:
            parts = execution_id.split(".", 2)
            if len(parts) >= 2 and parts[1].isdigit():
                step = parts[1]
        derived = (eid, user_id, session_id, graph_id or payload.get("name"), step,
                   execution_id, correlation, cause(rule, eid, correlation))


def derived_alone(event: Event) -> tuple[Any, ...]:
    """:func:`derive` for ``event`` on its own (one built by hand, without its derived
    fields): from its payload, as the first event of its run (no owner, no cause)."""
    row = (event.run_id, event.seq, event.type, event.timestamp, event.payload, None)
    return deriver()(row)


def enrich(rows: Iterable[Row], run: Mapping[str, Any] | None = None) -> list[Event]:
    """Envelopes for one run's stored rows ``(run_id, seq, type, ts, payload, idem)`` in
    ``seq`` order; ``run`` gives ``user_id``, ``session_id`` and ``graph_id``."""
    rows = list(rows)
    return [_construct({
        "id": d[0], "type": type_, "run_id": run_id, "seq": seq, "timestamp": ts,
        "user_id": d[1], "session_id": d[2], "agent_id": d[3], "step_id": d[4],
        "execution_id": d[5], "correlation_id": d[6], "causation_id": d[7],
        "idempotency_key": idem, "payload": payload, "checksum": None})
        for (run_id, seq, type_, ts, payload, idem), d in zip(rows, derive(rows, run),
                                                             strict=True)]


def bodies(rows: Iterable[Row], run: Mapping[str, Any] | None = None,
           ) -> list[dict[str, object]]:
    """:func:`enrich` as the envelopes' fields but ``checksum`` (what it is the hash of),
    without building the envelopes. Keys in sorted order (what :func:`canonical` sorts
    them into: then at no cost)."""
    rows = list(rows)
    return [{
        "agent_id": d[3], "causation_id": d[7], "correlation_id": d[6], "execution_id": d[5],
        "id": d[0], "idempotency_key": idem, "payload": payload, "run_id": run_id, "seq": seq,
        "session_id": d[2], "step_id": d[4], "timestamp": ts, "type": type_, "user_id": d[1]}
        for (run_id, seq, type_, ts, payload, idem), d in zip(rows, derive(rows, run),
                                                             strict=True)]


_set = object.__setattr__
#: Where a pydantic 2 model instance keeps its state: what :func:`_construct` writes.
_LAYOUT = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
_FAST = getattr(BaseModel, "__slots__", None) == _LAYOUT


def _construct(fields: dict[str, Any]) -> Event:
    """``Event.model_construct(**fields)`` for every field, in field order, trusted: what
    pydantic's does without its per-field alias and default handling (several times
    faster; reading a long history builds many envelopes).

    The package's one use of pydantic's private instance layout (:data:`_LAYOUT`). With
    another layout it is the public ``Event.model_construct``;
    ``tests/events/test_envelope_construct.py`` fails when pydantic changes it."""
    if not _FAST:
        return Event.model_construct(**fields)
    event = object.__new__(Event)
    _set(event, "__dict__", fields)
    _set(event, "__pydantic_fields_set__", set(fields))
    _set(event, "__pydantic_extra__", None)
    _set(event, "__pydantic_private__", None)
    return event
