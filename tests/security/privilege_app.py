"""What the least-privilege tests run: a Mock-backend agent (agent classes are found by
``module:Qualname``, so it lives at module level), and a worker app built from the
environment for the broker tests::

    celery -A tests.security.privilege_app:celery worker ...

The app registers the demo graph (classify -> three lookups in a chord -> merge ->
answer) and nothing else: every message it sends goes to hypha's own queues. With
``HYPHA_LP_DONE`` set, a worker appends the name of each task it ran to that file (the
test knows beat's supervisor task went through).
"""

from __future__ import annotations

import os
from typing import Any

from celery.signals import task_postrun

from hypha_celery import Hypha, Settings
from hypha_celery.agents import Agent, NoReply
from hypha_celery.demo import demo_graph


class Counter(Agent):
    """Counts its turns."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"scripts": opts["scripts"]}, {"turns": 0}

    def handle_response(self, ref: str, response: Any, state: dict[str, Any]) -> NoReply:
        return NoReply({"turns": state["turns"] + 1})


def build(settings: Settings) -> Hypha:
    hypha = Hypha(settings)
    hypha.register(demo_graph())
    return hypha


def _done(sender: Any = None, **_: Any) -> None:
    with open(os.environ["HYPHA_LP_DONE"], "a") as out:
        out.write(f"{getattr(sender, 'name', '?')}\n")


if os.environ.get("HYPHA_LP_DONE"):
    task_postrun.connect(_done, weak=False)
if os.environ.get("HYPHA_BROKER_URL"):
    hypha = build(Settings.from_env())
    celery = hypha.celery
