"""The run projection's document (``hypha_runs.doc``), typed.

:class:`View` is a ``TypedDict``, not a dataclass, by choice: :func:`~hypha_celery.events.
fold.apply_event` updates it in place on every step's hot path, and the store writes and
reads it as the JSON document it is, with no conversion either way (a dataclass would cost
a copy per read and per write, and the old documents load as they are). The price: it is
a mutable ``dict`` at run time, so nothing but the type checker stops a write of a wrong
type — the fold is its one writer. Every key is always present (no presence reads) but
``awaiting_message``, there only while a node parked the run; ``seq`` (and
``updated_at``) are the row's columns, set when the store reads the row.
"""

from __future__ import annotations

from typing import Any, NotRequired, cast

from typing_extensions import TypedDict

from hypha_celery.events.status import RunStatus

__all__ = ["AwaitingJson", "AwaitingMessageDoc", "CaseDoc", "ErrorJson", "FsmPosition",
           "LastOutcome", "Parked", "Quarantine", "ReviewDoc", "TerminalError", "View",
           "view_of_row"]

class AwaitingJson(TypedDict):
    """What a parked run waits for: the reply to ``message_id`` on the bus queue
    ``queue``, until ``until`` (then the node times out)."""

    message_id: str
    queue: str
    until: float


#: An error as data: ``type``, ``message``, ``class`` (its retry class), and for some
#: ``dead_letter`` (the dead-letter reason), ``by`` (``"supervisor"``), ``effect``
#: (``"unknown"``: an effect may have happened, the run is quarantined) or ``awaiting``
#: (not a failure: the node parks the run until a message comes).
ErrorJson = TypedDict("ErrorJson", {"type": str, "message": str, "class": str,
                                    "dead_letter": str, "by": str, "effect": str,
                                    "awaiting": AwaitingJson}, total=False)


class LastOutcome(TypedDict):
    """The last node or reducer outcome applied (what ``ctx.last`` is made of)."""

    node_id: str
    execution_id: str
    ok: bool
    value: dict[str, object] | None
    error: ErrorJson | None
    dead_letter_id: NotRequired[int]


class TerminalError(TypedDict):
    """Why a run failed or was cancelled."""

    reason: str
    message: str


class AwaitingMessageDoc(TypedDict):
    """A run parked by its node until a message comes (``run.suspended``)."""

    execution_id: str
    node_id: str
    attempt: int
    message_id: str
    queue: str
    until: float


class Quarantine(TypedDict):
    execution_id: str
    node_id: str | None
    reason: str | None
    attempt: int


class Parked(TypedDict):
    execution_id: str
    dead_letter_id: int


class CaseDoc(TypedDict):
    """A workflow state's recovery case, as its ``recovery.case.*`` events fold it
    (:mod:`hypha_celery.events.cases`): the state and node whose failure opened it, its
    status (a :class:`~hypha_celery.events.status.CaseStatus` value), when it opened, the
    last failure's fingerprint and evidence hash, the cycles so far, the strategy tried
    now and its attempts, the failures in a row with no progress, the strategies tried,
    the states compensated, why it ended."""

    case_id: str
    state: str
    node: str
    status: str
    opened_at: float
    fingerprint: str
    evidence: str
    cycles: int
    strategy: str | None
    attempts: int
    no_progress: int
    tried: list[str]
    compensating: str | None
    compensated: list[str]
    reason: str | None


class FsmPosition(TypedDict):
    """A workflow's state once one is entered, its path, the run's step when entered;
    its last recovery case, how many it opened, the states compensated."""

    workflow: str | None
    state: str | None
    path: list[str]
    step: NotRequired[int | None]
    case: NotRequired[CaseDoc | None]
    cases: NotRequired[int]
    #: States whose effect a case compensated (until the run enters them again).
    compensated: NotRequired[list[str]]


class ReviewDoc(TypedDict):
    """One human review; ``by`` once it is no longer ``pending``."""

    status: str
    subject: Any
    reason: str | None
    expires_at: float | None
    step: int | None
    by: NotRequired[str | None]
    #: An approval's note, when it has one.
    note: NotRequired[str]


class View(TypedDict):
    """A run's projection (see :func:`~hypha_celery.events.fold.new_view` for the
    meaning of each key)."""

    run_id: str
    graph_id: str | None
    status: RunStatus
    user_id: str | None
    session_id: str | None
    lane: str | None
    input: Any
    state: dict[str, object]
    step: int
    waiting: str | None
    waiting_nodes: list[str]
    last: LastOutcome | None
    result: Any
    error: TerminalError | None
    deadline: float | None
    max_steps: int | None
    notify: dict[str, object] | None
    idempotency_key: str | None
    cancel_requested: bool
    attempt: int
    retry_at: float | None
    deliveries: int
    recoveries: int
    quarantine: Quarantine | None
    parked: Parked | None
    #: only while a node parked the run (``run.suspended``): absent otherwise, so the
    #: documents of runs that never park stay as the previous version wrote them
    awaiting_message: NotRequired[AwaitingMessageDoc]
    fanout: int
    created_at: float | None
    updated_at: float | None
    fsm: FsmPosition | None
    reviews: dict[str, ReviewDoc]
    held_since: float | None
    seq: NotRequired[int]


def view_of_row(doc: Any, seq: int, updated_at: float | None) -> View:
    """The view of a ``hypha_runs`` row: its document (as any version wrote it) with
    the row's ``seq`` and ``updated_at``; the status as a :class:`RunStatus`."""
    view = cast(View, dict(doc))
    view["seq"] = seq
    view["updated_at"] = updated_at
    view["status"] = RunStatus(view["status"])
    return view
