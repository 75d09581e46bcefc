"""The console's sessions page: a user sees their own sessions, each linked to its runs;
the metadata is content (shown only when the operator turns content on)."""

from __future__ import annotations

from hypha_celery import Hypha, SessionOpening
from tests.console.support import SECRET, Tokens, app_for, client
from tests.runtime.support import WAIT


def test_the_sessions_page_lists_a_users_own_sessions(hypha: Hypha, t: Tokens) -> None:
    opening = SessionOpening(profile="triage", pack="support@1", metadata={"note": SECRET})
    mine = hypha.as_user(t.alice_id).start("echo", {"n": 1}, session_id="desk",
                                           session=opening)
    theirs = hypha.as_user(t.bob_id).start("echo", {"n": 2}, session_id="elsewhere")
    for run in (mine, theirs):
        run.wait(WAIT)
    app = app_for(hypha, t)
    page = client(app, t.alice).get("/sessions")
    assert page.status_code == 200 and 'id="sessions"' in page.text
    assert "desk" in page.text and "support@1:triage" in page.text and mine.id in page.text
    assert f"/runs?session=desk&amp;user={t.alice_id}" in page.text
    assert "elsewhere" not in page.text and theirs.id not in page.text
    assert SECRET not in page.text  # metadata is content
    admin = client(app_for(hypha, t, show_content=True), t.admin).get("/sessions").text
    assert "desk" in admin and "elsewhere" in admin and SECRET in admin


def test_the_sessions_page_shows_each_sessions_status(hypha: Hypha, t: Tokens) -> None:
    for session_id in ("open-one", "closed-one"):
        hypha.as_user(t.alice_id).start("echo", {"n": 1}, session_id=session_id).wait(WAIT)
    hypha.close_session("closed-one", user_id=t.alice_id)
    page = client(app_for(hypha, t), t.alice).get("/sessions").text
    assert "<th>Status</th>" in page
    assert '<td class="status status-active">active</td>' in page
    assert '<td class="status status-closed">closed</td>' in page
    assert "closed-one" in page and "open-one" in page
