"""Calling an agent's callbacks on the worker: checked results, contained failures.

A *contained* callback (``handle_error``, ``handle_event``, ``post_turn``, ``pre_turn``)
that raises or returns something malformed keeps the state from before the call. Since a
callback may change the state it is given in place before it raises, an overridden one
works on a copy (one per call; the JSON state is copied by :func:`json_copy`). A
callback left at :class:`~.behaviour.Agent`'s default changes nothing and gets the state
itself."""

from __future__ import annotations

import logging
from typing import Any

from hypha_celery.agents.behaviour import Agent, AgentDecision, Halt, NoReply, Prompt, acting_as
from hypha_celery.graph.jsonsafe import is_json

log = logging.getLogger(__name__)


def json_copy(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists and tuples are copied; scalars shared)."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(json_copy(v) for v in value)
    return value


def overridden(agent: Agent, callback: str) -> bool:
    """Whether ``agent``'s class overrides ``callback`` (else it is the no-op default)."""
    return getattr(type(agent), callback) is not getattr(Agent, callback)


def given(agent: Agent, callback: str, state: Any) -> Any:
    """The state to hand ``callback``: a copy when it is the agent's own code."""
    return json_copy(state) if overridden(agent, callback) else state


def check_state(state: Any) -> None:
    if not is_json(state):
        raise TypeError("agent state must be JSON-serializable")


def decision(name: str, agent: Agent, callback: str, *args: Any) -> AgentDecision | None:
    """A decision callback's result, or None when it raised or returned a malformed
    value (logged with the exception type only)."""
    try:
        with acting_as(name):
            found = getattr(agent, callback)(*args)
        if not isinstance(found, NoReply | Prompt | Halt):
            raise TypeError(f"{callback} returned {type(found).__name__}")
        if isinstance(found, Prompt) and not isinstance(found.text, str):
            raise TypeError(f"{callback} returned a Prompt whose text is not a string")
        check_state(found.state)
        return found
    except Exception as exc:
        log.warning("agent %s failed: %s", callback, type(exc).__name__)
        return None


def contained(name: str, agent: Agent, callback: str, *args: Any) -> AgentDecision:
    """Like :func:`decision` with the state last in ``args``: the callback gets its own
    copy of it, and a failure keeps it (``NoReply(state)``)."""
    state = args[-1]
    found = decision(name, agent, callback, *args[:-1], given(agent, callback, state))
    return NoReply(state) if found is None else found


def post_turn(name: str, agent: Agent, outcome: Any, ref: str, state: Any) -> Any:
    """``post_turn``'s state, or ``state`` when it raised or returned non-JSON."""
    try:
        with acting_as(name):
            after = agent.post_turn(outcome, ref, given(agent, "post_turn", state))
        check_state(after)
    except Exception as exc:
        log.warning("agent post_turn raised %s", type(exc).__name__)
        return state
    return after


__all__ = ["check_state", "contained", "decision", "given", "json_copy", "overridden",
           "post_turn"]
