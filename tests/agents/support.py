"""Shared test agents and helpers for the agent scenario tests (GenAgent §4.5).

``Scripted`` is GenAgent's ``test_agent.ex`` in Python: every callback records an entry in
a module-level trace (``LOG``, keyed by agent name; it also sees callbacks whose state is
thrown away, ``post_run`` and ``terminate_agent``), appends it to ``state["trace"]``, then
delegates to the behaviour registered for that agent name in ``BEHAVIOUR`` (or does
GenAgent's default). Everything lives in this process, which is fine for the embedded app.

Built-in ``handle_event`` conventions (when no behaviour is registered): an event
``{"note": x}`` appends ``x`` to ``state["notes"]``; ``{"prompt": text}`` returns a
``Prompt``; ``{"halt": True}`` returns a ``Halt``. ``handle_stream_event`` counts events in
``state["streamed"]``.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hypha_celery import Hypha
from hypha_celery.agents import (
    Agent,
    AgentDecision,
    AgentStatus,
    Channel,
    Halt,
    NoReply,
    Poll,
    Prompt,
    Response,
    TurnError,
    attach,
    current_name,
    detach,
)
from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.backends.gate import gate_channel
from tests.runtime.support import WAIT, embedded, wait_until

Entry = tuple[Any, ...]
Fn = Callable[..., Any]

LOG: dict[str, list[Entry]] = {}
SEEN: dict[str, list[tuple[str, Any]]] = {}  # (callback, the state it was given)
BEHAVIOUR: dict[str, dict[str, Fn]] = {}
_lock = threading.Lock()


# -- the trace -------------------------------------------------------------------------
def record(name: str, entry: Entry, state: Any = None) -> None:
    with _lock:
        LOG.setdefault(name, []).append(entry)
        SEEN.setdefault(name, []).append((str(entry[0]), copy.deepcopy(state)))


def trace(name: str, *callbacks: str) -> list[Entry]:
    """The recorded entries of ``name`` (only those of ``callbacks`` when given)."""
    with _lock:
        found = list(LOG.get(name, ()))
    return [e for e in found if not callbacks or e[0] in callbacks]


def seen(name: str, callback: str) -> list[Any]:
    """The states ``callback`` was called with, in order."""
    with _lock:
        return [s for cb, s in SEEN.get(name, ()) if cb == callback]


def behave(name: str, **callbacks: Fn) -> None:
    """Register behaviour for agent ``name``: ``handle_response=fn(ref, response,
    state)`` and so on (same arguments as the callback, ``self`` left out)."""
    with _lock:
        BEHAVIOUR.setdefault(name, {}).update(callbacks)


def _delegate(callback: str, default: Fn, *args: Any) -> Any:
    name = current_name()
    with _lock:
        fn = BEHAVIOUR.get(name or "", {}).get(callback)
    return (fn or default)(*args)


def _traced(state: Any, entry: Entry) -> Any:
    if not isinstance(state, dict):
        return state
    return {**state, "trace": [*state.get("trace", []), list(entry)]}


def _note(state: Any, event: Any) -> Any:
    if isinstance(event, dict) and "note" in event:
        return {**state, "notes": [*state.get("notes", []), event["note"]]}
    return state


def _default_event(event: Any, state: Any) -> AgentDecision:
    if isinstance(event, dict) and event.get("halt"):
        return Halt(state)
    if isinstance(event, dict) and isinstance(event.get("prompt"), str):
        return Prompt(event["prompt"], state)
    return NoReply(state)


class Scripted(Agent):
    """Records every callback, then does what ``BEHAVIOUR[name]`` says."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        state = {"trace": [], "notes": [], "streamed": 0, **opts.get("state", {})}
        return {"scripts": opts.get("scripts", [])}, state

    def _enter(self, entry: Entry, state: Any) -> Any:
        record(current_name() or "?", entry, state)
        return _traced(state, entry)

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        state = self._enter(("handle_response", ref, response.text), state)
        return _delegate("handle_response", lambda r, resp, s: NoReply(s), ref, response,
                         state)  # type: ignore[no-any-return]

    def handle_error(self, ref: str, error: TurnError, state: Any) -> AgentDecision:
        state = self._enter(("handle_error", ref, error.reason), state)
        return _delegate("handle_error", lambda r, e, s: NoReply(s), ref, error,
                         state)  # type: ignore[no-any-return]

    def handle_event(self, event: Any, state: Any) -> AgentDecision:
        state = _note(self._enter(("handle_event", event), state), event)
        return _delegate("handle_event", _default_event, event,
                         state)  # type: ignore[no-any-return]

    def handle_stream_event(self, event: BackendEvent, state: Any) -> Any:
        record(current_name() or "?", ("stream", event.kind, event.data.get("text")), state)
        state = {**state, "streamed": state.get("streamed", 0) + 1}
        return _delegate("handle_stream_event", lambda e, s: s, event, state)

    def pre_run(self, state: Any) -> Any:
        state = self._enter(("pre_run",), state)
        return _delegate("pre_run", lambda s: s, state)

    def pre_turn(self, prompt: str, state: Any) -> AgentDecision:
        state = self._enter(("pre_turn", prompt), state)
        return _delegate("pre_turn", lambda p, s: Prompt(p, s), prompt,
                         state)  # type: ignore[no-any-return]

    def post_turn(self, outcome: Response | TurnError, ref: str, state: Any) -> Any:
        what = "ok" if isinstance(outcome, Response) else outcome.reason
        state = self._enter(("post_turn", ref, what), state)
        return _delegate("post_turn", lambda o, r, s: s, outcome, ref, state)

    def post_run(self, state: Any) -> None:
        self._enter(("post_run",), state)
        _delegate("post_run", lambda s: None, state)

    def terminate_agent(self, reason: str, state: Any) -> None:
        self._enter(("terminate_agent", reason), state)


# -- scripts -----------------------------------------------------------------------------
def result(text: str = "ok", **data: Any) -> list[BackendEvent]:
    return [BackendEvent.new("result", {"text": text, **data})]


def texts(*parts: str, end: str | None = "result") -> list[BackendEvent]:
    """Text deltas, then a ``result`` (``end="result"``), an ``error`` event (``end`` is
    its reason) or nothing (``end=None``: no terminal event)."""
    events = [BackendEvent.new("text", {"text": p}) for p in parts]
    if end == "result":
        events.append(BackendEvent.new("result", {}))
    elif end is not None:
        events.append(BackendEvent.new("error", {"reason": end}))
    return events


def held_after(tag: str, before: Iterable[BackendEvent], after: Iterable[BackendEvent],
               timeout: float = WAIT) -> Callable[[str], Iterator[BackendEvent]]:
    """A callable script: yields ``before``, announces ``tag`` blocked (as a gate does,
    so ``MockBackend.wait_blocked(tag)`` works), waits for ``MockBackend.release(tag)``,
    then yields ``after``."""
    before, after = list(before), list(after)

    def script(prompt: str) -> Iterator[BackendEvent]:
        yield from before
        channel = gate_channel()
        channel.push(f"{tag}:blocked", {"tag": tag, "thread": threading.current_thread().name})
        if channel.pop(f"{tag}:release", timeout) is None:
            raise RuntimeError(f"gate {tag} not released")
        yield from after

    return script


def crashing_after(before: Iterable[BackendEvent]) -> Callable[[str], Iterator[BackendEvent]]:
    """A callable script that yields ``before`` and then raises (a stream crash)."""
    before = list(before)

    def script(prompt: str) -> Iterator[BackendEvent]:
        yield from before
        raise RuntimeError("stream crashed")

    return script


class Blocker:
    """Blocks a callback (for instance ``handle_event``) until the test lets it go: a way
    to hold the pump between two steps without sleeping."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()

    def block(self) -> None:
        self.entered.set()
        if not self.go.wait(WAIT):
            raise RuntimeError("blocker was never released")

    def wait_entered(self) -> None:
        assert self.entered.wait(WAIT), "the blocked callback was never reached"


# -- telemetry ---------------------------------------------------------------------------
TURN_EVENTS = (("turn", "start"), ("turn", "stop"), ("turn", "error"), ("turn", "rejected"),
               ("turn", "cancelled"))
RICH_EVENTS = (("halted",), ("input", "rejected"), ("terminated",))


class Telemetry:
    """Collects the turn events (and a few rich ones) of one agent. ``("halted",)`` is
    also appended to the agent's ``LOG`` as ``("telemetry:halted",)``, to check its
    place among the callbacks."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.events: list[tuple[tuple[str, ...], dict[str, Any], dict[str, Any]]] = []
        self._lock = threading.Lock()

    def _handle(self, event: tuple[str, ...], measurements: dict[str, Any],
                metadata: dict[str, Any]) -> None:
        if metadata.get("agent") != self.agent:
            return
        with self._lock:
            self.events.append((tuple(event), dict(measurements), dict(metadata)))
        if tuple(event) == ("halted",):
            record(self.agent, ("telemetry:halted",))

    def __enter__(self) -> Telemetry:
        for event in TURN_EVENTS + RICH_EVENTS:
            attach(event, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for event in TURN_EVENTS + RICH_EVENTS:
            detach(event, self._handle)

    def of(self, *event: str) -> list[dict[str, Any]]:
        """Metadata (with the measurements merged in) of every ``event``."""
        with self._lock:
            return [{**m, **md} for e, m, md in self.events if e == tuple(event)]

    def turns(self) -> list[tuple[str, str, int]]:
        """``(what, ref, attempt)`` of every turn event, in emission order."""
        with self._lock:
            return [(e[1], md["ref"], md["attempt"]) for e, _, md in self.events
                    if e[0] == "turn"]


# -- the world a test runs in -----------------------------------------------------------
class World:
    """An embedded app plus unique names and gates; ``close`` releases every gate (so
    abandoned stream threads end), forgets the agents' traces and closes the app."""

    def __init__(self, store_url: str) -> None:
        self.h: Hypha = embedded(store_url)
        self.tags: list[str] = []
        self.names: list[str] = []

    @property
    def agents(self) -> Any:
        return self.h.agents

    def name(self, label: str = "agent") -> str:
        name = f"{label}-{uuid.uuid4().hex[:8]}"
        self.names.append(name)
        return name

    def tag(self, label: str = "gate") -> str:
        tag = f"{label}-{uuid.uuid4().hex}"
        self.tags.append(tag)
        return tag

    def gate(self, tag: str, events: list[BackendEvent] | None = None) -> dict[str, Any]:
        return MockBackend.gate(tag, result() if events is None else events, timeout=WAIT)

    def start(self, name: str, scripts: list[Any], **opts: Any) -> None:
        self.h.agents.start(Scripted, name=name, backend=MockBackend, scripts=scripts,
                            **opts)

    @staticmethod
    def blocked(tag: str) -> None:
        assert MockBackend.wait_blocked(tag, WAIT) is not None, f"{tag} never blocked"

    @staticmethod
    def release(tag: str) -> None:
        MockBackend.release(tag)

    def messages(self, ch: Channel, until: Callable[[dict[str, Any]], bool]
                 ) -> list[dict[str, Any]]:
        """Messages of ``ch`` in arrival order, up to and including the first that
        satisfies ``until``."""
        got: list[dict[str, Any]] = []
        while True:
            msg = self.h.agents.receive(ch, WAIT)
            assert msg is not None, f"timed out; got {got}"
            got.append(msg)
            if until(msg):
                return got

    def completion(self, ch: Channel, ref: str) -> dict[str, Any]:
        """The outcome of ``ref``'s completion (messages before it are skipped)."""
        msgs = self.messages(ch, lambda m: m["type"] == "completion" and m["ref"] == ref)
        return dict(msgs[-1]["outcome"])

    def settled(self, name: str, ref: str) -> Poll:
        """``poll(name, ref)`` once it is no longer pending."""
        def done() -> Poll | None:
            poll: Poll = self.h.agents.poll(name, ref)
            return None if poll.status == "pending" else poll
        return wait_until(done, what=f"{ref} to end")  # type: ignore[no-any-return]

    def status(self, name: str) -> AgentStatus:
        return self.h.agents.status(name)  # type: ignore[no-any-return]

    def close(self) -> None:
        for tag in self.tags:
            MockBackend.release(tag)
        with _lock:
            for name in self.names:
                LOG.pop(name, None)
                SEEN.pop(name, None)
                BEHAVIOUR.pop(name, None)
        self.h.close()


def prompts(name: str) -> list[str]:
    """The prompts ``pre_turn`` saw, in order (what the agent dispatched or refused)."""
    return [e[1] for e in trace(name, "pre_turn")]


def outcome_of(msg: dict[str, Any]) -> tuple[str, str]:
    """``("ok", text)`` or ``("error", reason)`` of a completion message."""
    out = msg["outcome"]
    return ("ok", out["ok"]["text"]) if "ok" in out else ("error", out["error"])


def is_completion(ref: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m["type"] == "completion" and m["ref"] == ref
