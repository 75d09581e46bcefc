"""Live rows over server-sent events: rows as the run records them, then ``end``."""

from __future__ import annotations

import threading

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
