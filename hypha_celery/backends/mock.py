"""``MockBackend``: a scriptable backend for tests and examples (GenAgent ``Mock``, §2.5).

``start_session({"scripts": [...], "session_id": ..., "start_error": ...})``. One script
per upcoming turn, consumed in order by ``prompt``:

* a list of :class:`BackendEvent` (or their ``to_json()`` dicts): the stream yields them;
* ``callable(prompt) -> iterable of BackendEvent``: called lazily when the stream is consumed;
* ``MockBackend.error(reason)``: ``prompt`` raises ``BackendError(kind=reason)``;
* ``MockBackend.raising(reason)``: the stream raises ``BackendError(kind=reason)``;
* ``MockBackend.gate(tag, events, timeout=5.0)``: the stream announces ``tag`` (see
  :meth:`wait_blocked`), waits for :meth:`release`, then yields ``events``; unreleased
  after ``timeout`` seconds it raises ``BackendError(kind="gate_timeout")``. Gates work
  across processes when ``HYPHA_MOCK_GATE_URL`` names a Redis (:mod:`.gate`);
  ``gate(tag, events, ack="id")`` acknowledges a session id before it blocks;
* ``MockBackend.echo_session()``: the stream answers the session id it finds in the
  session (``""`` when none): what the next turn's worker sees.

A list of events (a script's, a gate's) may hold ``MockBackend.ack(session_id)`` steps:
the stream calls the runtime's ``checkpoint(session_id)`` there (mid-turn), as a CLI
backend does when its CLI reports its session. ``checkpoint_session`` records the id; an
id other than the one the session already holds is ``conflicting_session_id``.

The session is a plain JSON dict holding the remaining scripts, the prompt history and the
session id, so history and remaining scripts can be read wherever the session is stored.
``prompt`` updates it **in place** (and returns it): an attempt that fails synchronously
(an ``error`` script, or ``no_script`` when none is left) is still recorded and its script
still consumed. A callable script is not data: it is kept in a process-local registry under
the session's script-set id, so it only runs in the process that started the session (the
embedded runtime, tests); elsewhere ``prompt`` raises ``BackendError(kind="script_unavailable")``.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import ClassVar, Literal, TypedDict, cast

from hypha_celery.backends.base import Backend, Checkpoint, Session
from hypha_celery.backends.error import BackendError
from hypha_celery.backends.event import BackendEvent, BackendEventJson
from hypha_celery.backends.gate import GateMessage, gate_channel
from hypha_celery.jsontypes import JsonObject

ScriptFn = Callable[[str], Iterable[BackendEvent]]
_DATA_SCRIPTS = frozenset({"events", "error", "raise", "gate", "echo_session"})


class AckStep(TypedDict):
    """A step of an event list: acknowledge ``session_id`` mid-turn."""

    type: Literal["checkpoint"]
    session_id: str


#: One step of a script's event list: an event (or its JSON), or an acknowledgement.
ScriptStep = BackendEvent | JsonObject | AckStep
_StepJson = BackendEventJson | AckStep  # an event's to_json() or an AckStep, as stored


class ErrorScript(TypedDict):
    type: Literal["error", "raise"]
    reason: str


class EventsScript(TypedDict):
    type: Literal["events"]
    events: list[_StepJson]


class GateScript(TypedDict):
    type: Literal["gate"]
    tag: str
    events: list[_StepJson]
    timeout: float
    ack: str | None


class EchoScript(TypedDict):
    type: Literal["echo_session"]


class CallableScript(TypedDict):
    type: Literal["callable"]
    ref: str


#: A script as the session stores it (JSON, on ``type``).
Script = ErrorScript | EventsScript | GateScript | EchoScript | CallableScript


class MockSession(TypedDict):
    """A MockBackend session: JSON, stored by the runtime between turns."""

    backend: Literal["mock"]
    script_set: str
    scripts: list[Script]
    history: list[str]
    session_id: str | None

_registry: dict[str, ScriptFn] = {}
_registry_lock = threading.Lock()


def _fail(kind: str, message: str = "") -> BackendError:
    return BackendError(MockBackend.provider, kind, False, message=message)


class MockBackend(Backend):
    provider: ClassVar[str] = "mock"

    # -- scripts that are plain data -------------------------------------------------
    @staticmethod
    def error(reason: str) -> ErrorScript:
        return {"type": "error", "reason": reason}

    @staticmethod
    def raising(reason: str) -> ErrorScript:
        return {"type": "raise", "reason": reason}

    @staticmethod
    def gate(tag: str, events: Sequence[ScriptStep], timeout: float = 5.0,
             ack: str | None = None) -> GateScript:
        return {"type": "gate", "tag": tag, "events": _events_json(events),
                "timeout": float(timeout), "ack": ack}

    @staticmethod
    def ack(session_id: str) -> AckStep:
        """A step of an event list: acknowledge ``session_id`` mid-turn."""
        return {"type": "checkpoint", "session_id": session_id}

    @staticmethod
    def echo_session() -> EchoScript:
        return {"type": "echo_session"}

    # -- gate control (from the test) ------------------------------------------------
    @staticmethod
    def release(tag: str) -> None:
        gate_channel().push(f"{tag}:release", {"tag": tag})

    @staticmethod
    def wait_blocked(tag: str, timeout: float = 5.0) -> GateMessage | None:
        """The announcement (``tag``, ``pid``, ``thread``) of a stream blocked at ``tag``,
        or None after ``timeout`` seconds. Each announcement is returned once."""
        return gate_channel().pop(f"{tag}:blocked", timeout)

    # -- inspection ------------------------------------------------------------------
    @staticmethod
    def history(session: Session) -> list[str]:
        return list(_state(session)["history"])

    @staticmethod
    def remaining(session: Session) -> int:
        return len(_state(session)["scripts"])

    # -- the Backend contract --------------------------------------------------------
    def start_session(self, opts: JsonObject) -> Session:
        start_error = opts.get("start_error")
        if start_error is not None:
            if isinstance(start_error, str):
                raise _fail(start_error)
            raise BackendError.normalize(self.provider, start_error)
        session_id = opts.get("session_id")
        if session_id is not None and not isinstance(session_id, str):
            raise _fail("invalid_option", "session_id must be a string")
        set_id = uuid.uuid4().hex
        found = opts.get("scripts")
        scripts = [_describe(s, f"{set_id}:{i}") for i, s in enumerate(
            found if isinstance(found, list) else [])]
        session: MockSession = {"backend": "mock", "script_set": set_id, "scripts": scripts,
                                "history": [], "session_id": session_id}
        return cast(Session, session)

    def prompt(self, session: Session, prompt: str,
               checkpoint: Checkpoint | None = None) -> tuple[Iterator[BackendEvent], Session]:
        state = _state(session)
        state["history"].append(prompt)
        if not state["scripts"]:
            raise _fail("no_script")
        script = state["scripts"].pop(0)
        if script["type"] == "error":
            raise _fail(script["reason"])
        if script["type"] == "callable":
            with _registry_lock:
                fn = _registry.get(script["ref"])
            if fn is None:
                raise _fail("script_unavailable", "callable scripts run only in the process "
                            "that started the session")
            return _call(fn, prompt), session
        return _play(script, session, checkpoint), session

    def checkpoint_session(self, session: Session, session_id: str) -> Session:
        state = _state(session)
        if state["session_id"] not in (None, session_id):
            raise _fail("conflicting_session_id", "the session already has another id")
        state["session_id"] = session_id
        return session

    def update_session(self, session: Session, result_data: JsonObject) -> Session:
        session_id = result_data.get("session_id")
        if isinstance(session_id, str):
            _state(session)["session_id"] = session_id
        return session

    def reset_session(self, session: Session) -> Session:
        _state(session)["session_id"] = None
        return session

    def terminate_session(self, session: Session) -> None:
        prefix = f"{_state(session)['script_set']}:"
        with _registry_lock:
            for ref in [r for r in _registry if r.startswith(prefix)]:
                del _registry[ref]


def _state(session: object) -> MockSession:
    """The session, typed: a MockBackend's own JSON (the runtime stores it as it is)."""
    if not isinstance(session, dict) or session.get("backend") != "mock":
        raise _fail("not_mock_backend", "not a MockBackend session")
    return cast(MockSession, session)


def _events_json(events: Iterable[object]) -> list[_StepJson]:
    return [cast(AckStep, e) if isinstance(e, dict) and e.get("type") == "checkpoint" else
            (e if isinstance(e, BackendEvent) else BackendEvent.from_json(e)).to_json()
            for e in events]


def _describe(script: object, ref: str) -> Script:
    """A script as JSON; callables are registered under ``ref``."""
    if isinstance(script, list | tuple):
        return {"type": "events", "events": _events_json(script)}
    if isinstance(script, dict) and script.get("type") in _DATA_SCRIPTS:
        desc = dict(script)
        if "events" in desc:
            desc["events"] = _events_json(desc["events"])
        return cast(Script, desc)
    if callable(script):
        with _registry_lock:
            _registry[ref] = script
        return {"type": "callable", "ref": ref}
    raise _fail("invalid_script", f"unsupported mock script: {type(script).__name__}")


def _call(fn: ScriptFn, prompt: str) -> Iterator[BackendEvent]:
    yield from fn(prompt)


def _play(script: ErrorScript | EventsScript | GateScript | EchoScript, session: Session,
          checkpoint: Checkpoint | None) -> Iterator[BackendEvent]:
    def ack(session_id: str) -> None:
        if checkpoint is None:
            MockBackend().checkpoint_session(session, session_id)
        else:
            checkpoint(session_id)

    if script["type"] == "error" or script["type"] == "raise":
        raise _fail(script["reason"])
    if script["type"] == "echo_session":
        yield BackendEvent.new("result", {"text": _state(session)["session_id"] or ""})
        return
    if script["type"] == "gate":
        if script.get("ack") is not None:
            ack(str(script["ack"]))
        _wait_gate(script["tag"], script["timeout"])
    for doc in script["events"]:
        if doc.get("type") == "checkpoint":
            ack(cast(AckStep, doc)["session_id"])
        else:
            yield BackendEvent.from_json(doc)


def _wait_gate(tag: str, timeout: float) -> None:
    channel = gate_channel()
    channel.push(f"{tag}:blocked", {"tag": tag, "pid": os.getpid(),
                                    "thread": threading.current_thread().name})
    if channel.pop(f"{tag}:release", timeout) is None:
        raise _fail("gate_timeout", f"gate {tag!r} was not released within {timeout} s")
