"""The console's memory page: a user sees only their own records, an operator names the
user; text only with the content switch; a bad search is a 400, nothing else."""

from __future__ import annotations

from hypha_celery import Hypha
from hypha_celery.memory import MemoryScope
from tests.console.support import Tokens, app_for, client

ALICE_TEXT = "alice keeps the spare key under the blue pot"
BOB_TEXT = "bob prefers the window seat"


def _seed(hypha: Hypha, t: Tokens) -> str:
    record = hypha.memory.add(MemoryScope(t.alice_id), "semantic", ALICE_TEXT,
                              operation_id="a1", tags=["home"])
    hypha.memory.add(MemoryScope(t.bob_id), "preference", BOB_TEXT, operation_id="b1")
    return record.id


def _table(page: str) -> str:
    return page[page.index('id="memory"'):page.index("</table>", page.index('id="memory"'))]


def test_a_user_sees_only_their_own_memory(hypha: Hypha, t: Tokens) -> None:
    alice_id = _seed(hypha, t)
    app = app_for(hypha, t, show_content=True)
    bob = client(app, t.bob)
    own = bob.get("/memory")
    assert own.status_code == 200 and BOB_TEXT in _table(own.text)
    for url in (f"/memory?user={t.alice_id}", f"/memory?user={t.alice_id}&q=key"):
        other = bob.get(url)
        assert other.status_code == 200
        assert alice_id not in other.text and ALICE_TEXT not in other.text
        assert "No memory records." in other.text
    alice = client(app, t.alice).get("/memory?q=spare key").text
    assert alice_id in _table(alice) and ALICE_TEXT in alice


def test_an_operator_names_the_user_and_text_needs_the_switch(hypha: Hypha,
                                                            t: Tokens) -> None:
    alice_id = _seed(hypha, t)
    hidden = client(app_for(hypha, t), t.admin)
    assert "Name a user" in hidden.get("/memory").text
    page = hidden.get(f"/memory?user={t.alice_id}").text
    row = _table(page)
    assert alice_id in row and "semantic" in row and "home" in row
    assert f"{len(ALICE_TEXT)} chars" in row and ALICE_TEXT not in page
    shown = client(app_for(hypha, t, show_content=True), t.admin)
    assert ALICE_TEXT in shown.get(f"/memory?user={t.alice_id}&q=blue").text
    bad = hidden.get(f'/memory?user={t.alice_id}&q="unbalanced')
    assert bad.status_code == 400 and "q:" in bad.text
    assert hidden.get("/memory?user=" + "x" * 300).status_code == 400
