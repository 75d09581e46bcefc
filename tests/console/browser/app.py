"""The app the browser tests' ``celery worker`` runs (and the console shows)::

    HYPHA_TEST_APP=tests.console.browser.app:build celery -A hypha_celery.testing.worker_app ...

* ``browser-slow``: :data:`STEPS` steps, each node sleeping ``input["sleep"]`` seconds: a
  run to follow live;
* ``browser-park``: one node that fails (transient, no retries left: dead-lettered) until
  the file named by ``input["flag"]`` exists; the run parks (``on_dead_letter="park"``)
  and continues when redriven;
* ``Echo``: a conversational agent for the MockBackend (its scripts are the replies).
"""

from __future__ import annotations

import os
import time
from typing import Any

from hypha_celery import Context, Finish, Graph, Hypha, Next, Node, RetryPolicy, Settings
from hypha_celery.agents import Agent, NoReply, Response

STEPS = 5


def nap(state: dict[str, Any], input: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(input["sleep"]))
    return {"naps": state.get("naps", 0) + 1}


def slow_policy(ctx: Context) -> Next | Finish:
    if ctx.step < STEPS:
        return Next("nap", {"sleep": ctx.input["sleep"]})
    return Finish({"naps": ctx.state["naps"]})


def call(state: dict[str, Any], input: dict[str, Any]) -> dict[str, Any]:
    if not os.path.exists(input["flag"]):
        raise ConnectionError("the endpoint is down until the flag is flipped")
    return {"called": True}


def park_policy(ctx: Context) -> Next | Finish:
    return Next("call", ctx.input) if ctx.step == 0 else Finish(ctx.state)


class Echo(Agent):
    """Counts the replies its MockBackend scripts give."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"replies": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({"replies": state["replies"] + 1})


def build(settings: Settings) -> Hypha:
    hypha = Hypha(settings)
    hypha.register(Graph("browser-slow", {"nap": nap}, slow_policy, max_steps=STEPS + 2,
                         execution_timeout=60.0, node_timeout=20.0))
    hypha.register(Graph("browser-park", {
        "call": Node(call, retry=RetryPolicy(max_attempts=1, backoff=0.0, max_backoff=0.0)),
    }, park_policy, on_dead_letter="park", execution_timeout=120.0, node_timeout=20.0))
    return hypha
