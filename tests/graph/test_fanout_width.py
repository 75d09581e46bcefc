"""A fan-out's width is bounded: ``Graph(max_fanout=)``, 256 edges by default. A policy
that returns a wider ``FanOut`` ends the run ``run.failed`` with reason
``fanout_too_wide`` at the decision, before anything is scheduled."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Context, FanOut, Finish, Graph, Hypha, Next, RunFailed
from hypha_celery.errors import FailureReason, GraphSpecError
from hypha_celery.graph import DEFAULT_MAX_FANOUT
from tests.runtime.support import WAIT, assert_well_formed, embedded, of_kind


def one(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {}


def count(state: dict[str, Any], outcomes: list[Any]) -> dict[str, Any]:
    return {"edges": len(outcomes)}


def fan(ctx: Context) -> FanOut | Finish:
    if ctx.step == 0:
        return FanOut([Next("one", i) for i in range(ctx.input["width"])], reducer="count")
    return Finish(ctx.state)


def graph(**options: Any) -> Graph:
    return Graph(id="fan", nodes={"one": one}, reducers={"count": count},
                 decision_policy=fan, **options)


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    h = embedded(sqlite_url)
    try:
        yield h
    finally:
        h.close()


def test_the_bound_is_256_by_default_and_checked_at_definition() -> None:
    assert DEFAULT_MAX_FANOUT == 256 and graph().max_fanout == 256
    assert graph(max_fanout=3).max_fanout == 3
    for bad in (0, -1, 1.5, "8"):
        with pytest.raises(GraphSpecError, match="max_fanout"):
            graph(max_fanout=bad)


def test_a_fanout_wider_than_the_default_fails_the_run(hypha: Hypha) -> None:
    hypha.register(graph())
    run = hypha.start("fan", {"width": 3000})
    with pytest.raises(RunFailed) as info:
        run.wait(WAIT)
    assert info.value.reason == FailureReason.FANOUT_TOO_WIDE == "fanout_too_wide"
    [failed] = of_kind(run, "run.failed")
    assert failed.payload == {"reason": "fanout_too_wide", "message":
                              "FanOut of 3000 edges, past max_fanout=256"}
    assert not of_kind(run, "node.fanout.scheduled")
    assert not of_kind(run, "decision.policy.recorded")  # the decision was refused
    assert_well_formed(run)


def test_a_graph_sets_its_own_bound(hypha: Hypha) -> None:
    hypha.register(graph(max_fanout=4))
    assert hypha.start("fan", {"width": 4}).wait(WAIT) == {"edges": 4}
    run = hypha.start("fan", {"width": 5})
    with pytest.raises(RunFailed, match="FanOut of 5 edges, past max_fanout=4") as info:
        run.wait(WAIT)
    assert info.value.reason == "fanout_too_wide"
