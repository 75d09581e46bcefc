"""Live rows over server-sent events: rows as the run records them, then ``end``."""

from __future__ import annotations

import re
import threading
from typing import Any

from hypha_celery import Hypha
from tests.console.support import GATE, Tokens, app_for, client


def test_the_stream_sends_rows_then_end(hypha: Hypha, t: Tokens) -> None:
    run = hypha.as_user(t.alice_id).start("echo", {"hold": True})
    c = client(app_for(hypha, t), t.alice)
    page = c.get(f"/runs/{run.id}").text
    assert f'data-live="/runs/{run.id}/live?after=' in page
    threading.Timer(0.5, GATE.set).start()  # the run goes on while we listen
    kinds: list[str] = []
    rows: list[str] = []
    with c.stream("GET", f"/runs/{run.id}/live?after=0") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                kinds.append(line[7:])
            elif line.startswith("data: <tr"):
                rows.append(line)
            if kinds and kinds[-1] == "end":
                break
    assert kinds[-1] == "end" and kinds.count("row") == len(rows) >= 10
    assert "run.completed" in rows[-1] and 'data-seq="1"' in rows[0]
    assert all("hold" not in row for row in rows)  # rows never carry input
    assert hypha.get_run(run.id).wait(15) == {"echo": {"hold": True}}


def test_a_finished_run_streams_what_is_left_and_ends(hypha: Hypha, t: Tokens) -> None:
    run = hypha.start("echo", {"n": 1})
    hypha.get_run(run.id).wait(15)
    last = hypha.store.events(run.id)[-1].seq
    c = client(app_for(hypha, t), t.admin)
    with c.stream("GET", f"/runs/{run.id}/live?after={last - 1}") as r:
        body = "".join(r.iter_text())
    assert body.count("event: row") == 1 and "event: end" in body
    assert c.get(f"/runs/{run.id}/live?after=x").status_code == 400


def _stream(c: Any, url: str) -> list[tuple[str, str]]:
    """The stream's ``(event, data)`` messages up to its ``end``."""
    messages: list[tuple[str, str]] = []
    kind, data = "", list[str]()
    with c.stream("GET", url) as r:
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif not line and kind:
                messages.append((kind, "\n".join(data)))
                if kind == "end":
                    break
                kind, data = "", []
    return messages


def test_the_facts_and_the_graph_follow_the_run(hypha: Hypha, t: Tokens) -> None:
    """Not only the timeline: the status, step and event counts and the drawing of a
    live page move with the run."""
    run = hypha.as_user(t.alice_id).start("echo", {"hold": True})
    c = client(app_for(hypha, t), t.alice)
    page = c.get(f"/runs/{run.id}").text
    live = re.search(r'data-live="([^"]+)"', page)
    assert live is not None and "&amp;from=1" in live.group(1)
    threading.Timer(0.5, GATE.set).start()
    messages = _stream(c, live.group(1).replace("&amp;", "&"))
    facts = [data for kind, data in messages if kind == "facts"]
    graphs = [data for kind, data in messages if kind == "graph"]
    assert facts and graphs and messages[-1][0] == "end"
    assert 'id="run-status">completed<' in facts[-1]
    total = len(hypha.store.events(run.id))
    assert f'id="run-events">{total}<' in facts[-1] and 'id="run-steps">' in facts[-1]
    assert graphs[-1].startswith("<svg") and ">completed<" in graphs[-1]  # the end box
    assert graphs[-1].count(">work<") == 2  # both steps drawn, from the page's start
    assert all("hold" not in data for _, data in messages)  # never the input


def test_a_live_page_seeds_its_drawing_from_its_first_event(hypha: Hypha, t: Tokens) -> None:
    run = hypha.start("echo", {"n": 1})
    hypha.get_run(run.id).wait(15)
    events = hypha.store.events(run.id)
    last = events[-1].seq
    c = client(app_for(hypha, t), t.admin)
    messages = _stream(c, f"/runs/{run.id}/live?after={last - 1}&from=1")
    (graph,) = [data for kind, data in messages if kind == "graph"]
    assert graph.count(">work<") == 2 and ">start<" in graph
    later = _stream(c, f"/runs/{run.id}/live?after={last - 1}&from={last - 2}")
    (drawn,) = [data for kind, data in later if kind == "graph"]
    assert "earlier steps" in drawn and ">work<" not in drawn
    assert c.get(f"/runs/{run.id}/live?after=1&from=x").status_code == 400
