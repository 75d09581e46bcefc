"""A node whose error says its effect may or may not have happened
(:class:`~hypha_celery.errors.EffectOutcomeUnknown`) quarantines the run, as the supervisor
does for an at-most-once node whose worker died: no retry, no ``run.failed``; what the
attempt did is in the log; ``release`` runs the node again as its next attempt,
``fail_quarantined`` ends the run. Embedded runtime, the real store (both backends)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph, Hypha, Next, Node, NodeContext, RetryPolicy
from hypha_celery.beat.supervisor import RecoveryPolicy, sweep
from hypha_celery.errors import EffectOutcomeUnknown, NotRedrivable, RunFailed
from hypha_celery.testing import wait_until
from tests.runtime.support import WAIT, assert_well_formed, kinds, of_kind, running

#: Retries every class, "unknown" included: an unknown effect must still not be retried.
EVERYTHING = RetryPolicy(max_attempts=3, backoff=0.01, max_backoff=0.02,
                         retry_on=("transient", "timeout", "unknown", "validation"))


class PaymentLost(EffectOutcomeUnknown):
    """The payment provider hung up after the request was sent."""


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    with running(store_url) as h:
        yield h


def once(node: str) -> Any:
    def policy(ctx: Context) -> Next | Finish:
        return Next(node, ctx.input) if ctx.step == 0 else Finish(ctx.state)
    return policy


class Pay:
    """Charges through ``ctx.tool``; the first attempt's call is lost mid-way."""

    def __init__(self) -> None:
        self.attempts: list[int] = []

    def __call__(self, state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        self.attempts.append(ctx.attempt)

        def charge(args: Any) -> dict[str, Any]:
            if ctx.attempt == 1:
                raise PaymentLost("the provider hung up after the request was sent")
            return {"charged": args["amount"]}

        return {"paid": ctx.tool("charge", charge, inp, side_effect="external_effect"),
                "attempt": ctx.attempt}


def quarantined(hypha: Hypha, run_id: str) -> None:
    wait_until(lambda: hypha.store.get(run_id)["status"] == "quarantined", WAIT,
               "the run to be quarantined")


def test_an_unknown_effect_quarantines_the_run_and_release_runs_the_next_attempt(
        hypha: Hypha) -> None:
    pay = Pay()
    hypha.register(Graph("eu1", {"pay": Node(pay, side_effect="external_effect",
                                             retry=EVERYTHING)}, once("pay")))
    run = hypha.start("eu1", {"amount": 7})
    quarantined(hypha, run.id)
    view = hypha.store.get(run.id)
    assert view["quarantine"] == {"execution_id": f"{run.id}.1", "node_id": "pay",
                                  "reason": "effect_outcome_unknown", "attempt": 1}
    assert view["waiting"] == f"{run.id}.1"  # still awaited: release re-runs it
    (q,) = of_kind(run, "run.quarantined")
    assert q.data["reason"] == "effect_outcome_unknown"
    seen = kinds(run)
    for kind in ("node.execution.started", "tool.call.started", "tool.call.failed"):
        assert kind in seen, kind
    for kind in ("node.execution.retrying", "node.execution.failed", "run.failed",
                 "node.execution.dead_lettered"):
        assert kind not in seen, kind
    (failed,) = of_kind(run, "tool.call.failed")
    assert failed.data["error"]["type"] == "PaymentLost"
    # a human decides: the supervisor leaves it, a second look changes nothing
    assert sweep(hypha._rt, now=time.time() + 80, policy=RecoveryPolicy(grace=0.2)) == []
    time.sleep(0.2)
    assert pay.attempts == [1]

    hypha.release(run.id, by="ops")
    assert run.wait(WAIT) == {"paid": {"charged": 7}, "attempt": 2}
    assert pay.attempts == [1, 2]
    (released,) = of_kind(run, "run.released")
    assert (released.data["attempt"], released.data["by"]) == (2, "ops")
    assert [e.data["attempt"] for e in of_kind(run, "node.execution.started")] == [1, 2]
    with pytest.raises(NotRedrivable):
        hypha.release(run.id)
    assert_well_formed(run)


def test_an_idempotent_node_raising_the_marker_is_quarantined_then_failed_by_a_human(
        hypha: Hypha) -> None:
    calls: list[int] = []

    def lost(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        calls.append(ctx.attempt)
        raise EffectOutcomeUnknown("the upload's connection dropped after the last byte")

    hypha.register(Graph("eu2", {"upload": Node(lost, retry=EVERYTHING)}, once("upload")))
    run = hypha.start("eu2")
    quarantined(hypha, run.id)
    assert hypha.store.get(run.id)["quarantine"]["reason"] == "effect_outcome_unknown"
    assert calls == [1]
    assert "node.execution.retrying" not in kinds(run)
    hypha.fail_quarantined(run.id, "checked by ops: the upload did land")
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "quarantined"
    assert calls == [1]
    assert_well_formed(run)


def test_an_ordinary_failure_is_not_quarantined(hypha: Hypha) -> None:
    def broken(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        raise RuntimeError("a plain bug")

    hypha.register(Graph("eu3", {"a": Node(broken)}, once("a")))
    run = hypha.start("eu3")
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == "node_failed"
    assert "run.quarantined" not in kinds(run)
