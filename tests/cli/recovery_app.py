"""An app for the ``hypha dlq`` / ``hypha quarantine`` command tests.

``park.flaky`` fails (transiently) until the file named by ``HYPHA_TEST_FIXED`` exists;
its retries are exhausted fast and the run parks on the dead letter.
``effect.send`` is an at-most-once node.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypha_celery import Context, Finish, Graph, Hypha, Next, Node, RetryPolicy

FIXED_ENV = "HYPHA_TEST_FIXED"


def _once(node: str) -> Any:
    def policy(ctx: Context) -> Next | Finish:
        return Next(node, ctx.input) if ctx.step == 0 else Finish(ctx.state)
    return policy


def flaky(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    if not Path(os.environ.get(FIXED_ENV, "/nonexistent")).exists():
        raise ConnectionError("upstream down")
    return {"fixed": True}


def send(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {"sent": True}


PARK = Graph("park", {"flaky": Node(flaky, retry=RetryPolicy(max_attempts=2, backoff=0.01,
                                                                max_backoff=0.05))},
             _once("flaky"), on_dead_letter="park")
EFFECT = Graph("effect", {"send": Node(send, side_effect="external_effect")}, _once("send"))

hypha = Hypha.from_env()
hypha.register(PARK)
hypha.register(EFFECT)
celery = hypha.celery
