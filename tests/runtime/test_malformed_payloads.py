"""A coordinator or reducer message whose payload does not parse is a dead letter
(``invalid_schema``), never an exception out of the task body (found by fuzzing)."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery import Hypha
from hypha_celery.runtime.config import COORDINATOR_QUEUE, COORDINATOR_TASK
from tests.runtime.support import wait_until


@pytest.mark.parametrize("payload", [
    {"run_id": "r", "execution_id": "e", "edges": 5},
    {"run_id": "r", "execution_id": "e", "edges": [{"x": 1}]},
])
def test_a_coordinator_payload_that_does_not_parse_is_a_dead_letter(
        hypha: Hypha, payload: dict[str, Any]) -> None:
    hypha.start_embedded_worker()
    hypha.celery.send_task(COORDINATOR_TASK, args=[payload], queue=COORDINATOR_QUEUE)
    letters = wait_until(lambda: hypha.store.dead_letters(), what="the dead letter")
    assert [(d["task"], d["reason"]) for d in letters] == [(COORDINATOR_TASK, "invalid_schema")]
    assert "payload does not parse" in letters[0]["error"]["message"]
    assert letters[0]["args"] == [payload]


def test_a_reducer_meta_that_does_not_parse_is_a_dead_letter(hypha: Hypha) -> None:
    from hypha_celery import Context, FanOut, Finish, Graph

    def policy(ctx: Context) -> FanOut | Finish:
        return Finish(None)

    hypha.register(Graph(id="g", nodes={"a": lambda s, i: {}}, decision_policy=policy,
                         reducers={"join": lambda s, outs: {}}))
    hypha.start_embedded_worker()
    hypha.celery.send_task("g.join", args=[[], {"run_id": "r"}], queue="hypha.nodes")
    letters = wait_until(lambda: hypha.store.dead_letters(), what="the dead letter")
    assert [(d["task"], d["reason"]) for d in letters] == [("g.join", "invalid_schema")]
