"""An app for the ``hypha agents`` command tests: agents started by the test (same store
file) are served by whichever process calls ``hypha.agents``, the CLI's included."""

from __future__ import annotations

from typing import Any

from hypha_celery import Hypha
from hypha_celery.agents import Agent, NoReply, Response

SECRET = "state-s3cret"


class Echo(Agent):
    """Replays its MockBackend scripts; keeps what it saw (and a secret) in its state."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"secret": SECRET, "seen": []}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({**state, "seen": [*state["seen"], response.text]})


hypha = Hypha.from_env()
celery = hypha.celery
