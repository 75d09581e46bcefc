"""``Agent``: the callbacks of a long-running conversational agent (GenAgent's behaviour),
and the decision shapes they return.

Where callbacks run: every callback runs in a worker task that owns the agent for the
moment (one at a time per agent, under its lane), with the agent's state loaded before and
stored after; ``init_agent`` runs in the process that calls ``start``. The instance is
built fresh (no arguments) wherever a callback runs, so keep everything that must last in
``state`` (plain JSON). ``handle_stream_event`` runs in the thread consuming the backend
stream. Never sleep in a callback: use ``notify`` (and beat, for clocks) instead.

Decisions (``handle_response``, ``handle_error``, ``handle_event``): ``NoReply(state)``,
``Prompt(text, state)`` (a follow-up turn; from ``handle_error`` of an ask or tell, a
*caller-owned retry* under the same ref) or ``Halt(state)``. ``pre_turn`` returns
``Prompt(text, state)`` to dispatch (possibly rewritten), ``NoReply(state)`` to skip the
turn, or ``Halt(state)`` to skip it and halt.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from hypha_celery.backends import BackendEvent, Response, TurnError

if TYPE_CHECKING:
    from hypha_celery.agents.context import AgentContext

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "hypha_agent_name", default=None)


def current_name() -> str | None:
    """The agent's name inside its callbacks (and its stream consumer); None elsewhere."""
    return _current.get()


@contextmanager
def acting_as(name: str) -> Iterator[None]:
    token = _current.set(name)
    try:
        yield
    finally:
        _current.reset(token)


@dataclass(frozen=True, slots=True)
class NoReply:
    state: Any


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    state: Any


@dataclass(frozen=True, slots=True)
class Halt:
    state: Any


AgentDecision = NoReply | Prompt | Halt
TurnOutcome = Response | TurnError


class Agent:
    """Subclass and implement ``init_agent`` and ``handle_response``; every other callback
    has GenAgent's default. ``context``: how each turn builds what the model sees
    (skills, the user's memory, instructions under a token budget; see
    :mod:`hypha_celery.agents.context`); None, the default: the prompt goes to the
    backend as it is."""

    context: ClassVar[AgentContext | None] = None

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """``(backend_opts, state)`` from the start options hypha did not consume.
        Raise to refuse the start (``AgentStartFailed``, reason ``init_agent_failed``)."""
        raise NotImplementedError

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        raise NotImplementedError

    def handle_error(self, ref: str, error: TurnError, state: Any) -> AgentDecision:
        return NoReply(state)

    def handle_event(self, event: Any, state: Any) -> AgentDecision:
        return NoReply(state)

    def handle_stream_event(self, event: BackendEvent, state: Any) -> Any:
        return state

    def pre_run(self, state: Any) -> Any:
        return state

    def pre_turn(self, prompt: str, state: Any) -> AgentDecision:
        return Prompt(prompt, state)

    def post_turn(self, outcome: TurnOutcome, ref: str, state: Any) -> Any:
        return state

    def post_run(self, state: Any) -> None:
        return None

    def terminate_agent(self, reason: str, state: Any) -> None:
        return None
