"""Acceptance 3: exactly once under real duplicate delivery.

The worker (prefork, 2 processes) and the client run ``tests.integration.app`` with
``HYPHA_TEST_DUPLICATE=1``: every task message — kickoff, coordinator, node, edge,
reducer, chain continuation — is published twice with the same headers, body and
task id, so the broker really delivers each one twice and the copies race in the
two worker processes.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.integration import app as itest
from tests.integration.conftest import Dedicated
from tests.integration.helpers import Stack, assert_exactly_once, assert_well_formed, of_kind

pytestmark = pytest.mark.services

RUNS = 20
EXPECTED = {"n": 3, "sum": 60, "failed_edges": 0}


def settled_deliveries(s: Stack, quiet: float = 1.0, timeout: float = 30.0) -> dict[str, int]:
    """Per task id, how often a worker process started it (once nothing moves)."""
    end = time.monotonic() + timeout
    last: dict[Any, Any] = {}
    stable_since = time.monotonic()
    while time.monotonic() < end:
        now = s.redis.hgetall(itest.DELIVERIES)
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= quiet:
            break
        time.sleep(0.1)
    return {k.decode(): int(v) for k, v in last.items()}


@pytest.mark.parametrize("inline", ["1", "0"], ids=["inline-coordinator", "coordinator-hop"])
@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_every_message_delivered_twice_still_records_everything_once(
    dedicated: Dedicated, broker: str, inline: str
) -> None:
    """``inline=0``: every coordinator step is its own broker message, so the
    coordinator itself is delivered twice as well."""
    env = {"HYPHA_INLINE_COORDINATOR": inline}
    with dedicated(broker=broker, duplicate=True, env=env) as s:
        # half at once (contention), half one at a time (the two copies of each
        # message run side by side, and a slower copy finishes after the run)
        runs = [s.client.start("itest_dup", {"jitter": 0.1}) for _ in range(RUNS // 2)]
        results = [s.wait(run, timeout=60) for run in runs]
        for _ in range(RUNS - len(runs)):
            runs.append(s.client.start("itest_dup", {"jitter": 0.1}))
            results.append(s.wait(runs[-1], timeout=60))
        assert results == [EXPECTED] * RUNS
        deliveries = settled_deliveries(s)  # the second copies have run too
        for run in runs:
            events = run.events()
            assert assert_well_formed(events).kind == "run.completed"
            assert_exactly_once(events)
            assert len(of_kind(events, "node.execution.scheduled")) == 3
            (fanout,) = of_kind(events, "node.fanout.scheduled")
            assert len(fanout.data["edges"]) == 3
            assert len(of_kind(events, "decision.policy.recorded")) == 5
            assert of_kind(events, "node.execution.late_result") == []  # a duplicate is not stale
            assert s.client.store.rebuild(run.id)["state"] == {"n": 3, "sum": 60,
                                                                "failed_edges": 0}
        assert all(count >= 2 for count in deliveries.values()), deliveries
        continuations = set(deliveries) - set().union(*(task_ids(run.events()) for run in runs))
        if inline == "1":
            assert continuations == set()  # the node's worker ran each step itself
        else:
            assert len(continuations) >= RUNS * 4  # after 3 nodes and the reducer


def task_ids(events: list[Any]) -> set[str]:
    """The Celery task ids hypha chose for a run: kickoff, nodes, edges, reducer."""
    ids = {f"{events[0].run_id}.0.c"}
    for e in events:
        if e.kind == "node.execution.scheduled":
            ids.add(e.data["execution_id"])
        elif e.kind == "node.fanout.scheduled":
            ids.add(e.data["execution_id"] + ".r")
            ids.update(edge["execution_id"] for edge in e.data["edges"])
    return ids
