"""The application of the compensation crash tests (``test_recovery_compensation.py``),
run in real worker processes::

    celery -A tests.integration.recovery_cases_app:celery worker -P prefork -c 2 ...

A booking workflow: ``Reserve`` (an effect with a compensation, ``release``), then
``Charge``, whose node refuses bad input (a ``validation`` error): its recovery case
escalates at once, so ``release`` runs in ``Compensating`` first. ``release`` is at most
once with a receipt. Its first attempt sleeps inside the call (the window the test kills
the worker in), after (``"mode": "after"``) or before (``"before"``) it applies the
release; every call and every applied release are counted in Redis (the result backend,
or ``CHAOS_SIDE_CHANNEL``), which the receipt reads.
"""

from __future__ import annotations

import time
from typing import Any

from hypha_celery import Hypha, Node, NodeContext, Settings
from hypha_celery.fsm import Fsm, WorkflowSpec, workflow_graph
from tests.integration.chaos_app import side_channel

#: HINCRBY <run_id>: calls of the compensation; releases it applied.
CALLS = "rc:release:calls"
APPLIED = "rc:release:applied"
#: The first attempt's sleep inside the call (within its timeout); later attempts' sleep.
SLEEP = 4.0
TIMEOUT = 4.5


def reserve(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {"seat": "12A"}


def charge(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    raise ValueError("card number malformed")


def release(state: dict[str, Any], job: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    side = side_channel()
    side.hincrby(CALLS, ctx.run_id, 1)
    first = ctx.attempt == 1
    if job["input"]["mode"] == "after":
        side.hincrby(APPLIED, ctx.run_id, 1)
    time.sleep(SLEEP if first else 0.1)
    if job["input"]["mode"] == "before":
        side.hincrby(APPLIED, ctx.run_id, 1)
    return {"seat": None, "released_by": "call"}


def released(state: dict[str, Any], job: Any, ctx: NodeContext) -> dict[str, Any] | None:
    """The receipt: the release happened iff the side channel counted it."""
    if side_channel().hget(APPLIED, ctx.run_id):
        return {"seat": None, "released_by": "receipt"}
    return None


NODES: dict[str, Any] = {
    "reserve": reserve, "charge": charge,
    "release": Node(release, side_effect="external_effect", receipt=released,
                    timeout=TIMEOUT)}
SPEC = WorkflowSpec.model_validate({
    "id": "rc_booking", "initial_state": "Reserve", "terminal_states": ["Done"],
    "states": [{"id": "Reserve", "node": "reserve", "compensate": "release"},
               {"id": "Charge", "node": "charge", "recovery": {}, "fallback": "Reserve",
                "degrade": "reserve"},
               {"id": "Done"}],
    "transitions": [{"from": "Reserve", "to": "Charge"}, {"from": "Charge", "to": "Done"}]})


def build(settings: Settings) -> Hypha:
    hypha = Hypha(settings)
    hypha.register(workflow_graph(Fsm(SPEC, NODES), NODES, max_steps=20,
                                  execution_timeout=120.0, node_timeout=3.0))
    return hypha


hypha = build(Settings.from_env())
celery = hypha.celery
