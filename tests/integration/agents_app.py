"""The application the agent integration tests run in real worker processes::

    celery -A tests.integration.agents_app:celery worker -Q hypha.agents ...

Settings come from the environment (HYPHA_BROKER_URL, HYPHA_RESULT_BACKEND,
HYPHA_STORE_URL, HYPHA_LEASE_INTERVAL); MockBackend gates meet the test through the Redis
named by HYPHA_MOCK_GATE_URL.
"""

from __future__ import annotations

from typing import Any

from hypha_celery import Hypha, Settings
from hypha_celery.agents import Agent, NoReply, Response, TurnError

hypha = Hypha(Settings.from_env())
celery = hypha.celery


class Keeper(Agent):
    """Keeps every outcome it sees, in order, in its state."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"outcomes": []}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({"outcomes": [*state["outcomes"], ["ok", response.text]]})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        return NoReply({"outcomes": [*state["outcomes"], ["error", error.reason]]})


class Asker(Agent):
    """Hands its start options to the backend (``model``, ``base_url``...); keeps every
    outcome in its state."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts), {"outcomes": []}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({"outcomes": [*state["outcomes"], ["ok", response.text]]})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        return NoReply({"outcomes": [*state["outcomes"], ["error", error.reason]]})
