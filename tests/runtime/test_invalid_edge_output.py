"""Non-JSON output ends the run ``invalid_state``: a fan-out edge's as a linear node's
(docs/architecture.md, "Errors become events")."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery import Context, FanOut, Finish, Graph, Next, Outcome, RunFailed
from tests.runtime.support import WAIT, assert_well_formed, of_kind, running


def good(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {"ok": inp}


def bad(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    return {"bad": object()}


def collect(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
    return {"seen": [o.ok for o in outcomes]}  # tolerates failed edges (collect-all)


def fan(ctx: Context) -> FanOut | Finish:
    if ctx.step == 0:
        return FanOut([Next("good", 1), Next("bad", 2)], reducer="collect")
    return Finish(ctx.state)


@pytest.mark.parametrize("on_node_error", ["fail", "policy"])
def test_a_non_json_edge_output_ends_the_run(store_url: str, on_node_error: str) -> None:
    with running(store_url) as hypha:
        hypha.register(Graph(id="fan_bad", nodes={"good": good, "bad": bad},
                             reducers={"collect": collect}, decision_policy=fan,
                             on_node_error=on_node_error))  # type: ignore[arg-type]
        run = hypha.start("fan_bad", {})
        with pytest.raises(RunFailed) as info:
            run.wait(WAIT)
        assert info.value.reason == "invalid_state"
        (end,) = of_kind(run, "run.failed")
        assert end.data["reason"] == "invalid_state"
        assert "bad" in end.data["message"] and "InvalidState" in end.data["message"]
        (edge,) = [e for e in of_kind(run, "node.execution.failed") if e.data.get("edge_of")]
        assert edge.data["error"]["type"] == "InvalidState"
        assert of_kind(run, "node.reducer.failed") and not of_kind(run, "node.reducer.completed")
        assert hypha.store.get(run.id)["state"] == {}  # nothing of the fan-out applied
        assert_well_formed(run)
