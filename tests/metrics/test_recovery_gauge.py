"""``hypha_recovery_cases{status}``: live runs by the status of their workflow's recovery
case, read from a real store (SQLite and PostgreSQL) on scrape."""

from __future__ import annotations

from typing import Any

from celery import Celery
from prometheus_client import CollectorRegistry

from hypha_celery.events.status import CaseStatus
from hypha_celery.metrics import HyphaCollector, names
from tests.fsm.test_recovery_cases import booking, start, waiting
from tests.runtime.support import WAIT, running


def sample(registry: CollectorRegistry, status: str) -> Any:
    return registry.get_sample_value(names.RECOVERY_CASES, {"status": status})


def test_live_runs_are_counted_by_their_case_status(store_url: str) -> None:
    app = Celery("recovery-gauge", broker="memory://")
    with running(store_url) as h:
        registry = CollectorRegistry()
        registry.register(HyphaCollector(app, lambda: [], h.store))
        before = {s.value: sample(registry, s.value) for s in CaseStatus}
        assert set(before) == {s.value for s in CaseStatus}  # every series, 0 when none
        spec = booking({"strategies": ["retry", "escalate"], "max_same_strategy": 1})
        run = start(h, spec, charge="always")
        waiting(run)
        h.start("booking", {"charge": 1}).wait(WAIT)  # resolved, and ended: not live
        assert sample(registry, "escalated") == before["escalated"] + 1
        assert sample(registry, "resolved") == before["resolved"]
        h.cancel(run.id)  # (PostgreSQL: the session's database, shared)
        assert sample(registry, "escalated") == before["escalated"]
    app.close()
