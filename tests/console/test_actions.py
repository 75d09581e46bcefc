"""Actions from the console: redrive a dead letter, release or fail a quarantined run.
Each needs an admin and this session's CSRF token, and the run's event names who acted;
anything else is refused with a clear page and changes nothing."""

from __future__ import annotations

import re
import uuid
from contextlib import closing
from pathlib import Path

import pytest

from hypha_celery import Graph, Hypha
from tests.cli import recovery_app
from tests.cli.recovery_app import quarantined
from tests.console.support import Tokens, app_for, client, csrf
from tests.runtime.support import WAIT, embedded, wait_until


@pytest.fixture
def parked(hypha: Hypha, t: Tokens, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> tuple[str, int, Path]:
    fixed = tmp_path / "fixed"
    monkeypatch.setenv(recovery_app.FIXED_ENV, str(fixed))
    # a graph of its own: the circuit of a failing dependency is shared through the store
    graph = Graph(f"park-{uuid.uuid4().hex[:8]}", recovery_app.PARK.nodes,
                  recovery_app.PARK.decision_policy, on_dead_letter="park")
    hypha.register(graph)
    run = hypha.as_user(t.alice_id).start(graph, {"order": 7})
    wait_until(lambda: hypha.store.get(run.id)["status"] == "parked",
               what=f"parked ({hypha.store.get(run.id)['status']})")
    (letter,) = hypha.store.dead_letters(run_id=run.id)
    return run.id, int(letter["id"]), fixed


def test_an_admin_redrives_a_dead_letter(hypha: Hypha, t: Tokens,
                                         parked: tuple[str, int, Path]) -> None:
    run_id, letter, fixed = parked
    admin = client(app_for(hypha, t), t.admin)
    page = admin.get("/dead-letters").text
    assert f'data-id="{letter}"' in page and 'class="redrive"' in page
    fixed.touch()
    r = admin.post(f"/dead-letters/{letter}/redrive", data={"csrf": csrf(admin)},
                   follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/dead-letters?done=redriven"
    assert hypha.get_run(run_id).wait(WAIT) == {"fixed": True}
    (redriven,) = [e for e in hypha.store.events(run_id) if e.type == "run.redriven"]
    assert redriven.data["by"] == "ops"
    assert "Dead letter redriven." in admin.get("/dead-letters?done=redriven").text
    again = admin.post(f"/dead-letters/{letter}/redrive", data={"csrf": csrf(admin)})
    assert again.status_code == 409 and "already redriven" in again.text


def test_refused_actions_change_nothing(hypha: Hypha, t: Tokens,
                                        parked: tuple[str, int, Path]) -> None:
    run_id, letter, fixed = parked
    fixed.touch()
    app = app_for(hypha, t)
    alice = client(app, t.alice)
    assert 'class="redrive"' not in alice.get("/dead-letters").text  # hers, read-only
    r = alice.post(f"/dead-letters/{letter}/redrive", data={"csrf": csrf(alice)})
    assert r.status_code == 403 and "operator" in r.text
    admin = client(app, t.admin)
    assert admin.post(f"/dead-letters/{letter}/redrive", data={}).status_code == 403
    forged = admin.post(f"/dead-letters/{letter}/redrive", data={"csrf": "0" * 64})
    assert forged.status_code == 403 and "nothing was changed" in forged.text
    other_site = admin.post(f"/dead-letters/{letter}/redrive", data={"csrf": csrf(admin)},
                            headers={"origin": "http://evil.example"})
    assert other_site.status_code == 403
    stranger = client(app)
    assert stranger.post(f"/dead-letters/{letter}/redrive", data={}).status_code == 403
    assert hypha.store.get(run_id)["status"] == "parked"
    assert hypha.store.dead_letter(letter)["status"] == "open"  # type: ignore[index]
    missing = admin.post("/dead-letters/999999999/redrive", data={"csrf": csrf(admin)})
    assert missing.status_code == 409 and "no dead letter 999999999" in missing.text


def test_a_script_acts_with_a_bearer_token(hypha: Hypha, t: Tokens,
                                           parked: tuple[str, int, Path]) -> None:
    run_id, letter, fixed = parked
    fixed.touch()
    c = client(app_for(hypha, t))
    r = c.post(f"/dead-letters/{letter}/redrive", follow_redirects=False,
               headers={"authorization": f"Bearer {t.admin}"})
    assert r.status_code == 303
    assert hypha.get_run(run_id).wait(WAIT) == {"fixed": True}


def test_release_and_fail_quarantined(t: Tokens, tmp_path: Path) -> None:
    """On a store of its own (SQLite): quarantining a run takes a supervisor sweep, which
    would act on every stale run of a store other tests share."""
    with closing(embedded(f"sqlite:///{tmp_path / 'q.db'}")) as hypha:
        hypha.register(recovery_app.EFFECT)
        first = quarantined(hypha)
        second = quarantined(hypha)
        app = app_for(hypha, t)
        admin = client(app, t.admin)
        page = admin.get("/dead-letters").text
        assert first in page and second in page and 'class="release"' in page
        r = admin.post(f"/quarantine/{second}/fail", data={"csrf": csrf(admin)},
                       follow_redirects=False)
        assert r.headers["location"] == "/dead-letters?done=failed"
        failed = hypha.store.last_event(second, "run.failed")
        assert failed is not None and failed.data["by"] == "ops"
        r = admin.post(f"/quarantine/{first}/release", data={"csrf": csrf(admin)},
                       follow_redirects=False)
        assert r.headers["location"] == "/dead-letters?done=released"
        released = hypha.store.last_event(first, "run.released")
        assert released is not None and released.data["by"] == "ops"
        not_held = admin.post(f"/quarantine/{second}/release", data={"csrf": csrf(admin)})
        assert not_held.status_code == 409 and "not quarantined" in not_held.text


def test_a_dead_lettered_runs_page_links_to_its_record(hypha: Hypha, t: Tokens,
                                                       parked: tuple[str, int, Path]) -> None:
    run_id, letter, _ = parked
    app = app_for(hypha, t)
    alice = client(app, t.alice)
    page = alice.get(f"/runs/{run_id}").text
    facts = page[page.index('id="facts"'):page.index("</dl>")]
    assert f'<a href="/dead-letters/{letter}" class="dead-letter-link">#{letter}</a>' in facts
    record = alice.get(f"/dead-letters/{letter}")
    assert record.status_code == 200, record.text
    text = record.text
    assert f'id="dead-letter-run">{run_id}<' in text and 'id="dead-letter-status">open<' in text
    assert 'id="dead-letter-args">array of 1' in text and "order" not in text  # hidden
    assert 'class="redrive"' not in text  # hers, read-only
    assert f'href="/dead-letters/{letter}"' in alice.get("/dead-letters").text
    admin = client(app, t.admin)
    assert 'class="redrive"' in admin.get(f"/dead-letters/{letter}").text
    shown = client(app_for(hypha, t, show_content=True), t.admin).get(f"/dead-letters/{letter}")
    assert "&#34;order&#34;: 7" in shown.text  # the node's input, escaped
    bob = client(app, t.bob)
    theirs, missing = bob.get(f"/dead-letters/{letter}"), bob.get("/dead-letters/999999999")
    assert theirs.status_code == missing.status_code == 404
    said = [re.search(r'id="error-message">no dead letter (\d+)<', r.text)
            for r in (theirs, missing)]
    assert [m.group(1) if m else None for m in said] == [str(letter), "999999999"]
