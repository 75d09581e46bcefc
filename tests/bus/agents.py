"""Agents of the bus tests (module level: a worker process imports them by path)."""

from __future__ import annotations

from typing import Any

from hypha_celery.agents import Agent, AgentDecision, NoReply, Response


class Stage(Agent):
    """A one-turn-per-message agent: its backend options come from ``scripts``."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"turns": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        return NoReply({"turns": state["turns"] + 1})

