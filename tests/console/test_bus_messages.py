"""A run's bus messages on its console page: id, type, endpoints, status, attempts; the
payload only when the operator shows content."""

from __future__ import annotations

from hypha_celery import Hypha
from hypha_celery.bus import Message, human
from tests.console.support import SECRET, Tokens, app_for, client
from tests.runtime.support import WAIT


def test_a_run_page_lists_its_messages(hypha: Hypha, t: Tokens) -> None:
    run = hypha.as_user(t.alice_id).start("echo", {"n": 1})
    run.wait(WAIT)
    sent = hypha.bus.publish(Message.model_validate({
        "type": "review.request", "user_id": t.alice_id, "session_id": "s1",
        "run_id": run.id, "from": {"kind": "workflow", "id": run.id}, "to": human("carol"),
        "payload": {"note": SECRET}, "fsm_state": "Draft"}))
    hypha.bus.fail(sent.id, "carol is away", retry=True)
    page = client(app_for(hypha, t), t.alice).get(f"/runs/{run.id}").text
    section = page[page.index('id="messages"'):]
    section = section[:section.index("</table>")]
    assert sent.id in section and "review.request" in section
    assert f"workflow:{run.id}" in section and "human:carol" in section
    assert "status-queued" in section and "carol is away" in section and "Draft" in section
    assert SECRET not in page
    shown = client(app_for(hypha, t, show_content=True), t.alice).get(f"/runs/{run.id}").text
    assert SECRET in shown[shown.index('id="messages"'):]


def test_a_run_with_no_messages_says_so(hypha: Hypha, t: Tokens) -> None:
    run = hypha.as_user(t.alice_id).start("echo", {"n": 1})
    run.wait(WAIT)
    page = client(app_for(hypha, t), t.alice).get(f"/runs/{run.id}").text
    assert "No bus messages." in page
