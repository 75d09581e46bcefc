"""A timeline's times and their clocks: rows stay in ``seq`` order; each time says whose
clock stamped it (the worker that ran the node, when it happened, or the process that
recorded the event); a time earlier than the row before it is flagged, with by how
much, on a page and in a live stream."""

from __future__ import annotations

import re
from typing import Any

from hypha_celery import Hypha
from hypha_celery.console.runpage import Clock, shown_rows
from hypha_celery.events import Event
from hypha_celery.projections._timeline import rows
from tests.console.support import Tokens, app_for, client
from tests.runtime.support import WAIT


def ev(seq: int, kind: str, ts: float, **data: Any) -> Event:
    return Event.model_validate({"run_id": "r", "seq": seq, "type": kind, "timestamp": ts,
                                 "payload": data})


def test_times_keep_seq_order_say_their_clock_and_flag_going_back() -> None:
    events = [ev(7, "decision.policy.recorded", 102.0, step=1, type="next"),
              ev(8, "tool.call.requested", 102.2719, tool="t"),  # recorded at commit
              ev(9, "model.call.started", 102.2538, call_id="c"),  # happened earlier
              ev(10, "model.call.completed", 102.3, call_id="c")]
    shown = list(shown_rows(rows(events), 100.0, previous=(6, 102.5)))
    assert [r.row.event.seq for r in shown] == [7, 8, 9, 10]  # never reordered
    assert [r.clock for r in shown] == [Clock.RECORDED, Clock.RECORDED, Clock.NODE, Clock.NODE]
    assert [None if r.behind is None else round(r.behind * 1000, 1) for r in shown] == [
        500.0, None, 18.1, None]
    assert [r.before_seq for r in shown] == [6, 7, 8, 9]
    assert round(shown[2].offset * 1000, 1) == 2253.8
    assert shown_rows(rows(events[:1]), 100.0).__next__().behind is None  # nothing before


def test_a_page_labels_its_clocks_and_flags_a_time_going_back(hypha: Hypha, t: Tokens) -> None:
    run = hypha.start("echo", {"n": 1})
    run.wait(WAIT)
    events = hypha.store.events(run.id)
    back = events[-1].ts - 0.25  # recorded after the run ended, stamped 250 ms before
    seq = hypha.store.append(run.id, "node.execution.late_result",
                             {"execution_id": "x", "node_id": "work", "reason": "timeout"},
                             ts=back)
    page = client(app_for(hypha, t), t.admin).get(f"/runs/{run.id}").text
    assert 'id="clocks"' in page and "Time (ms, stamped by)" in page
    started = page[page.index('class="depth-2 node-execution-started'):]
    assert started[:started.index("</tr>")].count('<span class="clock"') == 1
    decided = page[page.index('class="depth-1 decision-policy-recorded'):]
    assert '<span class="clock"' not in decided[:decided.index("</tr>")]
    row = re.search(rf'<tr class="([^"]*)" data-seq="{seq}">(.*?)</tr>', page)
    assert row is not None and row.group(1).endswith(" behind")
    assert "↶ 250.0 ms" in row.group(2) and f"before seq {seq - 1}:" in row.group(2)
    c = client(app_for(hypha, t), t.admin)
    with c.stream("GET", f"/runs/{run.id}/live?after={seq - 1}&from={seq - 2}") as r:
        live = next(line for line in r.iter_lines() if line.startswith("data: <tr"))
    assert " behind" in live and "↶ 250.0 ms" in live and f"before seq {seq - 1}:" in live
