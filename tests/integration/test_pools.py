"""Acceptance 4 on a worker without time limits, and the worker command forms.

The threads pool cannot interrupt a node (no soft time limit), so a node that
sleeps past its timeout finishes: its result is stale and must change nothing.
"""

from __future__ import annotations

import pytest

from tests.integration import app as itest
from tests.integration.conftest import Dedicated
from tests.integration.helpers import (
    assert_well_formed,
    of_kind,
)

pytestmark = pytest.mark.services


def test_threads_pool_records_a_result_past_the_node_timeout_as_late(
    dedicated: Dedicated,
) -> None:
    with dedicated(pool="threads") as s:
        sleep = itest.SLOW_TIMEOUT + 0.7
        run = s.client.start("itest_slow", {"node": "slow", "sleep": sleep})
        result = s.wait(run)
        # the policy saw a NodeTimeout failure; the late value was never merged
        assert result == {"state": {}, "last_ok": False, "last_error": "NodeTimeout"}
        events = run.events()
        assert assert_well_formed(events).kind == "run.completed"
        (late,) = of_kind(events, "node.execution.late_result")
        assert late.data["reason"] == "timeout" and late.data["node_id"] == "slow"
        (failed,) = of_kind(events, "node.execution.failed")
        assert failed.data["error"]["type"] == "NodeTimeout"
        assert "update" not in failed.data
        assert failed.data["duration"] >= sleep  # it really ran to the end
        assert s.client.store.rebuild(run.id)["state"] == {}


@pytest.mark.parametrize("app", ["tests.integration.app", "tests.integration.app:celery"])
def test_plain_celery_worker_finds_the_app(app: str, dedicated: Dedicated) -> None:
    """``celery -A MODULE worker`` (Celery finds the ``celery`` attribute) and
    ``celery -A MODULE:celery worker`` both serve the graphs."""
    with dedicated(app=app) as s:
        run = s.client.start("itest_linear", {"n": 2})
        assert s.wait(run) == {"steps": [1, 2]}
