"""Cancellation against a real prefork worker: the awaited tasks are revoked (the
worker holds their ids and discards a queued one), edges that were running log their
own late results, and one terminal event is written."""

from __future__ import annotations

import time
import uuid

import pytest

from hypha_celery import RunCancelled
from tests.integration import app as itest
from tests.integration.conftest import Dedicated
from tests.integration.helpers import WAIT, assert_well_formed, of_kind, wait_until

pytestmark = pytest.mark.services


def test_cancel_revokes_queued_edges_and_fences_running_ones(dedicated: Dedicated) -> None:
    with dedicated() as s:  # prefork, 2 processes: two edges run, the third waits
        token = uuid.uuid4().hex
        edges = [["a", 2.0, False], ["b", 2.0, False], ["c", 0.01, False]]
        run = s.client.start("itest", {"question": "charge?", "edges": edges, "token": token})
        key = itest.started_key(token)
        wait_until(lambda: s.redis.llen(key) == 2, what="two edges running",
                   log=s.worker.tail)
        assert run.cancel()
        with pytest.raises(RunCancelled):
            run.wait(1)
        fid = f"{run.id}.2"
        ids = {f"{fid}.{i}" for i in range(3)}
        revoked: set[str] = set()
        for ids_of_worker in (s.client.celery.control.inspect(timeout=2).revoked() or {}
                              ).values():
            revoked.update(ids_of_worker)
        assert ids <= revoked, revoked
        late = wait_until(lambda: len(of_kind(run.events(), "node.execution.late_result")) == 2 and
                          of_kind(run.events(), "node.execution.late_result"), what="late results",
                          timeout=WAIT, log=s.worker.tail)
        time.sleep(0.5)
        assert s.redis.llen(key) == 2  # the queued edge never ran
        assert {e.data["execution_id"] for e in late} == {f"{fid}.0", f"{fid}.1"}
        assert {e.data["reason"] for e in late} == {"cancelled"}
        events = run.events()
        assert assert_well_formed(events).kind == "run.cancelled"
        (requested,) = of_kind(events, "run.cancel.requested")
        assert set(requested.data["revoked"]) == ids
