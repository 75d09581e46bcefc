"""Human review across processes: a workflow parks ``waiting_human`` holding no worker;
the approval, made in the test process, resumes it on the prefork worker over Redis
and RabbitMQ (PostgreSQL store)."""

from __future__ import annotations

import pytest

from hypha_celery import RunFailed
from hypha_celery.errors import NoPendingReview
from tests.integration.helpers import Stack, assert_well_formed, wait_until

pytestmark = pytest.mark.services


def parked(s: Stack) -> str:
    run = s.client.start("itest_review", None)
    wait_until(lambda: run.status().status == "waiting_human", what="the review",
               log=s.worker.tail)
    return run.id


def test_an_approval_resumes_the_parked_run_on_the_worker(any_stack: Stack) -> None:
    s = any_stack
    run = s.client.get_run(parked(s))
    assert s.client.approve(run.id, by="ops") == f"{run.id}.r1"
    assert run.wait(30) == 2
    assert s.client.store.get(run.id)["fsm"]["path"] == ["Draft", "HumanReview", "Ship",
                                                          "Done"]
    with pytest.raises(NoPendingReview):
        s.client.approve(run.id, by="ops")
    assert_well_formed(run.events())


def test_a_rejection_ends_the_run_on_the_worker(any_stack: Stack) -> None:
    s = any_stack
    run = s.client.get_run(parked(s))
    s.client.reject(run.id, by="ops", reason="not today")
    with pytest.raises(RunFailed) as info:
        run.wait(30)
    assert info.value.reason == "review_rejected"
