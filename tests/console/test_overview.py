"""The first page (``/``): the last hour's runs a minute, failure rate and p95 duration
as plots drawn on the server, the failing graphs, what waits for a person and (for an
admin) the queue depths; over a real store, as the signed-in principal sees it."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from hypha_celery import Fail, Graph, Hypha, Next
from hypha_celery.console import plots
from hypha_celery.console.plots import Plot, PlotKind
from tests.console.support import Tokens, app_for, client
from tests.runtime.support import WAIT, wait_until


def _failing(graph_id: str) -> Graph:
    return Graph(graph_id, {"work": lambda state, inp: {"n": 1}},
                 lambda ctx: Next("work", ctx.input) if ctx.step == 0
                 else Fail("it broke", "broken"))


def test_the_first_page_sums_up_the_last_hour(hypha: Hypha, t: Tokens) -> None:
    broken = f"broken-{uuid.uuid4().hex[:8]}"
    hypha.register(_failing(broken))
    alice = hypha.as_user(t.alice_id)
    runs = [alice.start("echo", {"n": i}) for i in range(3)] + [alice.start(broken, {})]
    for run in runs[:3]:
        run.wait(WAIT)
    wait_until(lambda: hypha.store.get(runs[3].id)["status"] == "failed", what="failed")
    hypha.as_user(t.bob_id).start(broken, {})  # bob's: never on alice's page

    app = app_for(hypha, t)
    c = client(app)
    r = c.post("/login", data={"token": t.alice}, follow_redirects=False)
    assert r.headers["location"] == "/"  # the first page is where a sign-in lands
    page = client(app, t.alice).get("/")
    assert page.status_code == 200, page.text
    text = page.text
    assert text.count('<svg xmlns="http://www.w3.org/2000/svg" class="plot"') == 3
    assert "4 in the hour" in text and "25 % of 4 ended" in text
    failing = text[text.index('id="failing"'):text.index("Waiting for a person")]
    row = re.search(rf'>{broken}</a></td><td>(\d+)</td><td>(\d+)</td><td>(\d+) %', failing)
    assert row is not None and row.groups() == ("1", "1", "100"), failing
    assert f"/runs?graph={broken}&amp;status=failed" in failing
    assert "echo" not in failing  # no failed run
    assert 'id="held"' in text and "open dead letters" in text
    assert 'id="depths"' not in text  # the fleet's queues: an admin's


def test_an_admin_sees_the_queue_depths(hypha: Hypha, t: Tokens) -> None:
    text = client(app_for(hypha, t), t.admin).get("/").text
    depths = text[text.index('id="depths"'):]
    assert "<code>hypha.nodes</code>" in depths and "<code>hypha.coordinator</code>" in depths


def test_a_broker_that_does_not_answer_is_said(hypha: Hypha, t: Tokens,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import hypha_celery.console.overview as overview

    def down(app: Any, queues: Any) -> dict[str, int]:
        raise ConnectionRefusedError("no broker")

    monkeypatch.setattr(overview, "queue_depths", down)
    page = client(app_for(hypha, t), t.admin).get("/")
    assert page.status_code == 200
    assert 'id="depths-error"' in page.text and "ConnectionRefusedError" in page.text


def test_plots_are_drawn_with_gaps_and_escaped() -> None:
    bars = plots.svg(Plot("runs <a>", [0.0, 3.0, None, 1.0], lambda v: f"{v:.0f} <runs>"))
    assert bars.count("<rect") == 2 and "&lt;runs&gt;" in bars and "<runs>" not in bars
    assert 'aria-label="runs &lt;a&gt;"' in bars and 'style="' not in bars
    line = plots.svg(Plot("p95", [1.0, 2.0, None, 3.0, 4.0], plots.duration, PlotKind.LINE))
    assert line.count("<polyline") == 2 and line.count("<circle") == 4  # a gap: two lines
    empty = plots.svg(Plot("rate", [None, None], str, PlotKind.LINE))
    assert "no data" in empty and "<polyline" not in empty
    assert [plots.duration(s) for s in (0.0042, 3.5, 95.0)] == ["4.2 ms", "3.50 s", "1.6 min"]
