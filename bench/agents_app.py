"""The agent and backend classes of ``bench/agents.py``, importable by the bench worker.

The worker runs ``bench.app:celery`` (whose ``Hypha`` registers ``hypha.agent.pump``) and
resolves these classes by their paths (``bench.agents_app:Counter``, ...) on the first
turn, as any worker that did not call ``start`` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hypha_celery.agents import Agent, NoReply, Response, TurnError
from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.backends.base import Checkpoint, Session


class Counter(Agent):
    """Counts its answered turns and failed turns: the smallest useful state."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts.get("scripts", [])}, {"turns": 0, "errors": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({**state, "turns": state["turns"] + 1})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        return NoReply({**state, "errors": state["errors"] + 1})


class LoopingMock(MockBackend):
    """``MockBackend`` that plays its first script every turn (put back after it is taken),
    so the stored session keeps its size: one script plus the prompt history. Only
    ``bench/agents.py turn``'s constant-size comparison uses it."""

    def prompt(self, session: Session, prompt: str,
               checkpoint: Checkpoint | None = None) -> tuple[Iterator[BackendEvent], Session]:
        scripts = session.get("scripts") or []
        first = dict(scripts[0]) if scripts else None
        events, session = super().prompt(session, prompt, checkpoint)
        if first is not None:
            session["scripts"].insert(0, first)
        return events, session


class Relay(Agent):
    """Hands its start options to the backend (``bench/agents_io.py``: an
    ``OpenAIBackend`` on the local slow provider); counts its turns."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts), {"turns": 0, "errors": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({**state, "turns": state["turns"] + 1})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        return NoReply({**state, "errors": state["errors"] + 1})


class Talker(Agent):
    """Passes its ``llm`` start option to its backend (``bench/models.py first_token``)."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["llm"]), {}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply(state)
