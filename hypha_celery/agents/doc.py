"""The agent doc, typed: what ``hypha_agents.doc`` holds, and the requests it carries.

The JSON is the one the previous (dict-based) version wrote, key for key and in the same
order, so rows and lane items it wrote load unchanged:

* :class:`AgentDoc`: ``name, incarnation, kind, backend, limits, state, halted,
  halt_pending, halting, draining, pre_run, pump, current, self_chain`` and, once a worker
  has owned the agent, ``owner``. The backend session is a column of its own
  (:attr:`AgentDoc.session`, never in the doc JSON).
* :class:`Request`: a queued prompt (a prompt-lane item, the self-chain slot):
  ``ref, origin, prompt, attempt, bytes, completion, stream_to, on_halt`` and, on a queued
  ask, ``caller``.
* :class:`CurrentTurn`: the request being served, plus ``stage`` (:class:`Stage`),
  ``sent, started_at`` once streaming, ``sealed, stream_state, keeps`` once deciding.
* An outcome (:data:`RequestOutcome`): :class:`Answered` ``{"ok": <Response JSON>}`` or
  :class:`Failed` ``{"error", "info"}`` (plus ``terminal`` for the outcome of a turn).

A :class:`Request` is read and written by its ``TypeAdapter`` (docs/architecture.md,
"Serialization"). The other three keep hand-written ``to_json`` / ``from_json``: which
keys they write depends on their state, not on one field's value (a turn's outcome has
``terminal``, even null; the current turn is its request's keys plus its own; ``owner``
appears once a worker has owned the agent), and they are written on every turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, TypeAdapter

from hypha_celery.agents.channels import TargetField
from hypha_celery.agents.options import Limits
from hypha_celery.backends import BackendEvent, Response, TurnError
from hypha_celery.store.agents import StoredJson


class Stage(StrEnum):
    """Where the current turn is: waiting to dispatch, streaming, or sealed and decided."""

    QUEUED = "queued"
    STREAMING = "streaming"
    DECIDING = "deciding"


class Phase(StrEnum):
    """The ``phase`` column (and ``AgentInfo.phase``)."""

    IDLE = "idle"
    BUSY = "busy"
    HALTED = "halted"


class Origin(StrEnum):
    """Who made a request: a caller (``ask``, ``tell``) or the agent itself."""

    ASK = "ask"
    TELL = "tell"
    SELF_CHAIN = "self_chain"
    EVENT = "event"

    @property
    def external(self) -> bool:
        return self is Origin.ASK or self is Origin.TELL


class OnHalt(StrEnum):
    """What a queued tell does when the agent halts: wait (``queue``) or end ``halted``."""

    QUEUE = "queue"
    FAIL = "fail"


# -- outcomes --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Answered:
    """A request that ended with a response (its JSON)."""

    response: Any

    def to_json(self) -> dict[str, object]:
        return {"ok": self.response}

    def decode(self) -> Response:
        return Response.from_json(self.response)


@dataclass(frozen=True, slots=True)
class Failed:
    """A request that ended with an error. ``turn``: the outcome of a turn attempt, whose
    JSON carries its ``terminal`` event (or null)."""

    reason: str
    info: Any = field(default_factory=dict)
    terminal: Any = None
    turn: bool = False

    def to_json(self) -> dict[str, object]:
        if self.turn:
            return {"error": self.reason, "info": self.info, "terminal": self.terminal}
        return {"error": self.reason, "info": self.info}

    def decode(self) -> TurnError:
        terminal = None if self.terminal is None else BackendEvent.from_json(self.terminal)
        return TurnError(self.reason, self.info or {}, terminal)


RequestOutcome = Answered | Failed


def outcome_of(result: Response | TurnError) -> RequestOutcome:
    """The sealed outcome of a turn attempt."""
    if isinstance(result, Response):
        return Answered(result.to_json())
    terminal = None if result.terminal is None else result.terminal.to_json()
    return Failed(result.reason, result.info, terminal, turn=True)


def outcome_from(data: Any) -> RequestOutcome:
    """An outcome from its JSON (a result row, the sealed slot of a turn)."""
    if "ok" in data:
        return Answered(data["ok"])
    return Failed(data["error"], data.get("info") or {}, data.get("terminal"),
                  "terminal" in data)


# -- requests and the current turn -----------------------------------------------------
def _queue_if_none(value: object) -> object:
    return OnHalt.QUEUE if value is None else value


def _none(value: object) -> bool:
    return value is None


@dataclass(slots=True)
class Request:
    """A prompt waiting for its turn (and the request part of the current turn). Its JSON
    is its fields in order (``caller`` only when set), read and written by
    :data:`_REQUEST`."""

    ref: str
    origin: Origin
    prompt: str
    attempt: int
    bytes: int
    completion: TargetField | None = None
    stream_to: TargetField | None = None
    on_halt: Annotated[OnHalt, BeforeValidator(_queue_if_none)] = OnHalt.QUEUE
    #: The caller lease id of a queued ask (see :mod:`.callers`).
    caller: Annotated[str | None, Field(exclude_if=_none)] = None

    def to_json(self) -> dict[str, object]:
        json: dict[str, object] = _REQUEST.dump_python(self, mode="json", by_alias=True)
        return json

    @classmethod
    def from_json(cls, data: object) -> Request:
        """The request :meth:`to_json` wrote (keys of a current turn's beside it ignored)."""
        return _REQUEST.validate_python(data)


_REQUEST = TypeAdapter(Request)


@dataclass(slots=True)
class Sealed:
    """A turn's outcome, fixed under the lock before the decision callbacks run."""

    outcome: RequestOutcome
    #: The state ``handle_stream_event`` left, when the decision starts from it (``keeps``).
    stream_state: Any = None
    keeps: bool = False


@dataclass(slots=True)
class CurrentTurn:
    """The request being served and how far it got."""

    request: Request
    stage: Stage = Stage.QUEUED
    #: The prompt sent (``pre_turn`` may rewrite it) and when: set once streaming.
    sent: str | None = None
    started_at: float | None = None
    sealed: Sealed | None = None

    @property
    def ref(self) -> str:
        return self.request.ref

    @property
    def attempt(self) -> int:
        return self.request.attempt

    @property
    def origin(self) -> Origin:
        return self.request.origin

    def same(self, other: CurrentTurn | None) -> bool:
        """The same ``(ref, attempt)`` (a write about ``self`` still applies to it)."""
        return other is not None and other.ref == self.ref and other.attempt == self.attempt

    def to_json(self) -> dict[str, object]:
        out = self.request.to_json()
        out["stage"] = self.stage.value
        if self.started_at is not None:
            out["sent"], out["started_at"] = self.sent, self.started_at
        if self.sealed is not None:
            out["sealed"] = self.sealed.outcome.to_json()
            out["stream_state"], out["keeps"] = self.sealed.stream_state, self.sealed.keeps
        return out

    @classmethod
    def from_json(cls, data: Any) -> CurrentTurn:
        sealed = None
        if "sealed" in data:
            sealed = Sealed(outcome_from(data["sealed"]), data.get("stream_state"),
                            bool(data.get("keeps")))
        return cls(Request.from_json(data), Stage(data["stage"]), data.get("sent"),
                   data.get("started_at"), sealed)


# -- the doc ---------------------------------------------------------------------------
@dataclass(slots=True)
class AgentDoc:
    """An agent: identity, limits, callback state, flags, the current turn, the
    self-chain slot, the pump token and its owner (the delivery serving it)."""

    name: str
    incarnation: str
    kind: str
    backend: str
    limits: Limits
    state: Any
    #: The backend session (:attr:`session`): the value, or the column as read
    #: (:class:`~hypha_celery.store.agents.StoredJson`) until something reads it.
    stored_session: Any = None
    halted: bool = False
    halt_pending: bool = False
    halting: bool = False
    draining: bool = False
    pre_run: bool = False
    pump: str | None = None
    current: CurrentTurn | None = None
    self_chain: Request | None = None
    owner: str | None = None
    #: Whether the JSON has an ``owner`` key (written from the first owner on).
    owned: bool = False
    #: The memory scope an agent with a context reads (its ids; absent otherwise).
    memory_scope: dict[str, str] | None = None

    @property
    def session(self) -> Any:
        """The backend session (parsed from its column on first read)."""
        if isinstance(self.stored_session, StoredJson):
            return self.stored_session.value()
        return self.stored_session

    @session.setter
    def session(self, value: Any) -> None:
        self.stored_session = value

    @property
    def phase(self) -> Phase:
        if self.pump:
            return Phase.BUSY
        return Phase.HALTED if self.halted else Phase.IDLE

    def to_json(self) -> dict[str, object]:
        """The doc column (without the session)."""
        out: dict[str, object] = {
            "name": self.name, "incarnation": self.incarnation, "kind": self.kind,
            "backend": self.backend, "limits": self.limits.to_json(), "state": self.state,
            "halted": self.halted, "halt_pending": self.halt_pending, "halting": self.halting,
            "draining": self.draining, "pre_run": self.pre_run, "pump": self.pump,
            "current": None if self.current is None else self.current.to_json(),
            "self_chain": None if self.self_chain is None else self.self_chain.to_json()}
        if self.owned:
            out["owner"] = self.owner
        if self.memory_scope is not None:
            out["memory_scope"] = self.memory_scope
        return out

    @classmethod
    def from_json(cls, data: Any, session: Any = None) -> AgentDoc:
        cur, chain = data.get("current"), data.get("self_chain")
        return cls(data["name"], data["incarnation"], data["kind"], data["backend"],
                   Limits.from_json(data["limits"]), data.get("state"), session,
                   bool(data.get("halted")), bool(data.get("halt_pending")),
                   bool(data.get("halting")), bool(data.get("draining")),
                   bool(data.get("pre_run")), data.get("pump"),
                   None if cur is None else CurrentTurn.from_json(cur),
                   None if chain is None else Request.from_json(chain),
                   data.get("owner"), "owner" in data, data.get("memory_scope"))


__all__ = ["AgentDoc", "Answered", "CurrentTurn", "Failed", "OnHalt", "Origin", "RequestOutcome",
           "Phase", "Request", "Sealed", "Stage", "outcome_from", "outcome_of"]
