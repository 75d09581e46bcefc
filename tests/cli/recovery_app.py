"""An app for the ``hypha dlq`` / ``hypha quarantine`` command tests.

``park.flaky`` fails (transiently) until the file named by ``HYPHA_TEST_FIXED`` exists;
its retries are exhausted fast and the run parks on the dead letter.
``effect.send`` is an at-most-once node; :func:`quarantined` makes a run of it that a
sweep quarantined.
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

def quarantined(lib: Hypha) -> str:
    """An ``effect`` run whose worker died after committing ``node.execution.started``,
    quarantined by a supervisor sweep (the sweep's decision about this run is checked;
    a sweep acts on every stale run of the store: give it a store of its own). Closes
    ``lib``, as a dead worker."""
    import time

    from hypha_celery import RecoveryPolicy, Settings
    from hypha_celery.beat.supervisor import sweep
    from hypha_celery.runtime import failures
    from hypha_celery.runtime.coordinator import coordinate
    from hypha_celery.runtime.lanes import kickoff_id
    from hypha_celery.runtime.protocol import Kickoff, NodeMessage
    from tests.runtime.support import wait_until

    run = lib.start("effect")
    wait_until(lambda: lib.store.get(run.id)["status"] == "completed", what="a first run")
    run = lib.start("effect")  # driven by hand: its messages are lost
    lib.close()
    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=lib.settings.store_url, embedded=False))
    h.register(EFFECT)
    try:
        coordinate(h._rt, Kickoff(run.id, kickoff_id(run.id)))
        env = NodeMessage(run.id, f"{run.id}.1", "send")
        assert failures.begin_effect(h._rt, env, 1, "gone:1")
        decisions = sweep(h._rt, now=time.time() + 80, policy=RecoveryPolicy(grace=0.1))
        assert {"run_id": run.id, "action": "quarantined"}.items() <= next(
            d for d in decisions if d["run_id"] == run.id).items()
    finally:
        h.close()
    return run.id


hypha = Hypha.from_env()
hypha.register(PARK)
hypha.register(EFFECT)
celery = hypha.celery
