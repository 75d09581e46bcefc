"""The console's pages over a real store (SQLite and PostgreSQL): signing in, the runs
list with its filters and paging, a run's page, agents, dead letters; what a user may
see; content hidden unless the operator turns it on."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from hypha_celery import Hypha
from tests.console.support import SECRET, Tokens, app_for, client
from tests.runtime.support import WAIT


def _done(hypha: Hypha, *runs: str) -> None:
    for run_id in runs:
        hypha.get_run(run_id).wait(WAIT)


def test_pages_need_a_sign_in(hypha: Hypha, t: Tokens) -> None:
    c = client(app_for(hypha, t))
    r = c.get("/runs", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/runs"
    r = c.get("/runs", headers={"accept": "application/json"})
    assert r.status_code == 401 and "Sign-in needed" in r.text
    assert c.get("/healthz").text == "ok" and c.get("/readyz").text == "ready"


def test_sign_in_out_and_bearer(hypha: Hypha, t: Tokens) -> None:
    app = app_for(hypha, t)
    c = client(app)
    r = c.post("/login", data={"token": "x" * 20, "next": "/runs"})
    assert r.status_code == 401 and 'id="login-failed"' in r.text
    r = c.post("/login", data={"token": t.admin, "next": "//evil.example/x"},
               follow_redirects=False)
    assert r.headers["location"] == "/"  # never off-site: the first page
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and t.admin not in cookie
    assert 'id="principal">admin:ops<' in c.get("/runs").text
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get("/runs").text)
    assert token is not None
    r = c.post("/logout", data={"csrf": token.group(1)}, follow_redirects=False)
    assert r.status_code == 303
    assert c.get("/runs", follow_redirects=False).status_code == 303
    bearer = client(app)
    r = bearer.get("/runs", headers={"authorization": f"Bearer {t.alice}"})
    assert r.status_code == 200 and f"user:{t.alice_id}" in r.text
    assert bearer.get("/runs", headers={"authorization": "Bearer nope"}).status_code == 401


def test_runs_list_filters_and_pages(hypha: Hypha, t: Tokens) -> None:
    alice = hypha.as_user(t.alice_id)
    runs = [alice.start("echo", {"n": i}, session_id=f"s-{i % 2}").id for i in range(5)]
    _done(hypha, *runs)
    c = client(app_for(hypha, t), t.alice)
    page = c.get("/runs").text
    assert all(r in page for r in runs)
    one = c.get("/runs?session=s-1").text
    assert runs[1] in one and runs[3] in one and runs[0] not in one
    assert runs[0] not in c.get("/runs?status=failed").text
    first = c.get("/runs?limit=2").text
    assert runs[4] in first and runs[3] in first and runs[2] not in first
    more = re.search(r'href="/runs\?([^"]+)" id="next-page"', first)
    assert more is not None
    second = c.get("/runs?" + more.group(1).replace("&amp;", "&")).text
    assert runs[2] in second and runs[1] in second and runs[4] not in second
    assert runs[0] in c.get("/runs?since=2000-01-01&until=2999-01-01").text


def test_a_run_page(hypha: Hypha, t: Tokens) -> None:
    alice = hypha.as_user(t.alice_id)
    run = alice.start("echo", {"q": SECRET})
    _done(hypha, run.id)
    page = client(app_for(hypha, t), t.alice).get(f"/runs/{run.id}").text
    assert 'id="run-status">completed<' in page
    assert "<svg" in page and ">work<" in page and ">completed" in page  # the graph
    assert page.count('class="depth-') >= 10  # the timeline
    assert "decision.policy.recorded" in page and "node.execution.completed" in page
    assert "<b>echo</b>" in page and "object {q}" in page  # the state's shapes
    assert "<b>count</b> <span class=\"value\">int, 1 bytes" in page
    assert SECRET not in page  # content stays hidden
    assert "data-live" not in page  # a finished run has no live stream


def test_content_when_the_operator_turns_it_on(hypha: Hypha, t: Tokens) -> None:
    run = hypha.as_user(t.alice_id).start("echo", {"q": SECRET})
    _done(hypha, run.id)
    page = client(app_for(hypha, t, show_content=True), t.alice).get(f"/runs/{run.id}").text
    assert SECRET in page and "Content is hidden" not in page


def test_a_user_sees_only_their_own(hypha: Hypha, t: Tokens) -> None:
    mine = hypha.as_user(t.alice_id).start("echo", {"n": 1})
    theirs = hypha.as_user(t.bob_id).start("echo", {"n": 2})
    _done(hypha, mine.id, theirs.id)
    app = app_for(hypha, t)
    bob = client(app, t.bob)
    listing = bob.get("/runs").text
    assert theirs.id in listing and mine.id not in listing
    other = bob.get(f"/runs/{mine.id}")
    missing = bob.get("/runs/0123456789abcdef0123456789abcdef")
    assert other.status_code == missing.status_code == 404
    assert (other.text.replace(mine.id, "ID")
            == missing.text.replace("0123456789abcdef0123456789abcdef", "ID"))
    assert bob.get(f"/runs/{mine.id}/live").status_code == 404
    assert mine.id in client(app, t.admin).get(f"/runs?user={t.alice_id}").text


def test_dead_letters_and_agents_pages(hypha: Hypha, t: Tokens) -> None:
    app = app_for(hypha, t)
    admin = client(app, t.admin)
    page = admin.get("/dead-letters").text
    assert 'id="dead-letters"' in page and 'id="quarantined"' in page
    agents = admin.get("/agents")
    assert agents.status_code == 200 and 'id="agents"' in agents.text
    missing = admin.get("/agents/nobody-here")
    assert missing.status_code == 404 and "Not found" in missing.text


def test_an_agent_page_shows_what_its_turn_events_carry(hypha: Hypha, t: Tokens) -> None:
    """The turns table reads the agent event models: a turn's request, origin and attempt
    (no duration: no agent event carries one), and agent.started's kind."""
    from hypha_celery.backends import BackendEvent, MockBackend
    from tests.console.browser.app import Echo

    reply = [BackendEvent.new("text", {"text": "pong"}), BackendEvent.new("result", {})]
    hypha.agents.start(Echo, name="echo-page", backend=MockBackend, scripts=[reply])
    try:
        assert hypha.agents.ask("echo-page", "ping", timeout=WAIT).text == "pong"
        page = client(app_for(hypha, t), t.admin).get("/agents/echo-page").text
    finally:
        hypha.agents.stop("echo-page")
    turns = page.split('id="turns"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(\d+)</td><td>[^<]*</td><td>([a-z_.]+)</td><td>([^<]*)</td>"
                      r"\s*<td>([^<]*)</td></tr>", turns)
    by_type = {kind: (ref, detail.strip()) for _, kind, ref, detail in rows}
    ref, detail = by_type["agent.turn.completed"]
    assert ref and detail == "ask, attempt 1"
    assert by_type["agent.turn.started"] == (ref, "ask, attempt 1")
    assert by_type["agent.started"][1].endswith("Echo")


def test_the_replay_diff_against_a_fixture(hypha: Hypha, t: Tokens, tmp_path: Path) -> None:
    from hypha_celery.replay._fixture import capture
    from hypha_celery.replay._store import FileFixtureStore

    same = hypha.start("echo", {"n": 1})
    other = hypha.start("echo", {"n": 2})
    _done(hypha, same.id, other.id)
    FileFixtureStore(tmp_path).save(capture(hypha.store.events(same.id), fixture_id="golden"))
    c = client(app_for(hypha, t, fixtures=tmp_path), t.admin)
    page = c.get(f"/runs/{same.id}").text
    assert '<option value="golden"' in page and 'id="diff"' not in page
    diff = c.get(f"/runs/{same.id}?fixture=golden").text
    assert diff.count('class="pass"') == 10 and 'class="fail"' not in diff
    changed = c.get(f"/runs/{other.id}?fixture=golden").text
    assert '<tr class="fail"><td>output</td><td>differs</td><td>differs (content hidden)' \
        in changed
    assert c.get(f"/runs/{same.id}?fixture=nope").status_code == 400


def _ask(state: dict[str, Any], question: str, ctx: Any) -> dict[str, Any]:
    return {"answer": ctx.llm("openai:gpt-4.1-mini",
                              [{"role": "user", "content": question}]).text}


def test_model_calls_with_their_usage(hypha: Hypha, t: Tokens, hypha_openai_server: Any,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from hypha_celery import Finish, Graph, Next, Node
    from hypha_celery.testing import Reply

    for name, value in hypha_openai_server.env().items():
        monkeypatch.setenv(name, value)
    hypha_openai_server.script(Reply.text("Paris is the answer", usage=(12, 5, 0, 0)))
    hypha.register(Graph(
        id="qa", nodes={"ask": Node(_ask, models=["openai:gpt-4.1-mini"])},
        decision_policy=lambda ctx: Next("ask", ctx.input) if ctx.step == 0
        else Finish(ctx.state), max_steps=5))
    run = hypha.start("qa", SECRET)
    assert run.wait(WAIT) == {"answer": "Paris is the answer"}
    page = client(app_for(hypha, t), t.admin).get(f"/runs/{run.id}").text
    calls = page[page.index('id="calls"'):page.index("Replay diff")]
    assert "<td>model</td><td>openai:gpt-4.1-mini</td><td>completed</td>" in calls
    assert "12 in / 5 out" in calls
    assert SECRET not in page and "Paris is the answer" not in page
    shown = client(app_for(hypha, t, show_content=True), t.admin).get(f"/runs/{run.id}").text
    assert "Paris is the answer" in shown


def test_a_long_run_pages_its_events(hypha: Hypha, t: Tokens,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A page shows a window of the run's events and what happened in it; the state a
    later page's decisions saw is folded from the events before it."""
    import hypha_celery.console.pages as pages

    monkeypatch.setattr(pages, "TIMELINE_PAGE", 6)
    run = hypha.start("echo", {"n": 1})
    _done(hypha, run.id)
    total = len(hypha.store.events(run.id))
    c = client(app_for(hypha, t), t.admin)
    first = c.get(f"/runs/{run.id}").text
    assert first.count('data-seq="') == 6 and 'id="timeline-next"' in first
    assert 'id="timeline-prev"' not in first and ">start<" in first
    second = c.get(f"/runs/{run.id}?after=6").text
    seqs = [int(s) for s in re.findall(r'data-seq="(\d+)"', second)]
    assert seqs == list(range(7, min(12, total) + 1))
    assert 'id="timeline-prev"' in second and "earlier steps" in second
    assert "<b>count</b> <span class=\"value\">int" in second  # folded from before
    last = c.get(f"/runs/{run.id}?after={total - 1}").text
    assert 'id="timeline-next"' not in last and "run.completed" in last
    assert 'id="run-status">completed<' in last
