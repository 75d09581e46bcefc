"""The console in headless chromium: every page as an operator, a user's narrower view,
a live run followed to its end without reloading, a dead letter redriven by a click, and
the screenshots of docs/images (``HYPHA_SCREENSHOTS_DIR=docs/images`` refreshes them)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.console.auth import COOKIE
from tests.console.browser.app import STEPS, Echo
from tests.console.browser.conftest import WAIT, Console

pytestmark = pytest.mark.services

PNG = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Seeded:
    """Two finished runs, one of alice's and one of bob's, and a live agent."""

    alice_run: str
    bob_run: str
    agent: str


@pytest.fixture(scope="module")
def seeded(console: Console) -> Iterator[Seeded]:
    hypha = console.hypha
    alice = hypha.start("browser-slow", {"sleep": 0.0}, user_id="alice", session_id="s-a")
    bob = hypha.start("browser-slow", {"sleep": 0.0}, user_id="bob", session_id="s-b")
    name = f"echo-{alice.id[:8]}"
    reply = [BackendEvent.new("text", {"text": "pong"}), BackendEvent.new("result", {})]
    hypha.agents.start(Echo, name=name, backend=MockBackend, scripts=[reply])
    assert hypha.agents.ask(name, "ping", timeout=WAIT).text == "pong"
    for run in (alice, bob):
        assert run.wait(timeout=WAIT) == {"naps": STEPS}
    try:
        yield Seeded(alice.id, bob.id, name)
    finally:
        hypha.agents.stop(name)


# -- helpers -------------------------------------------------------------------------------
def sign_in(browser: Any, console: Console, token: str) -> None:
    """A fresh sign-in through the login form (input#token, button#sign-in)."""
    browser.delete_all_cookies()
    browser.get(f"{console.url}/login")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "sign-in").click()
    wait(browser, lambda d: d.current_url.rstrip("/") == console.url, "the first page")


def visit(browser: Any, console: Console, path: str) -> None:
    browser.get(console.url + path)
    assert_clean(browser)


def assert_clean(browser: Any) -> None:
    """A rendered console page: no traceback, no crash page, the console's header."""
    html = browser.page_source
    assert "Traceback" not in html and 'File "' not in html, html[:2000]
    assert "Something went wrong" not in html, html[:2000]
    assert browser.find_element(By.CSS_SELECTOR, "header a.brand").text == "hypha"


def wait(browser: Any, predicate: Any, what: str, timeout: float = WAIT) -> Any:
    return WebDriverWait(browser, timeout, poll_frequency=0.05, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException)).until(
        predicate, f"timed out after {timeout}s waiting for {what}")


def texts(browser: Any, css: str) -> list[str]:
    return [e.text for e in browser.find_elements(By.CSS_SELECTOR, css)]


def timeline_rows(browser: Any) -> int:
    return int(browser.execute_script(
        "return document.querySelectorAll('#timeline tbody tr').length"))


def session_client(browser: Any, console: Console) -> httpx.Client:
    """An HTTP client on the browser's session cookie (to forge what a page never sends)."""
    cookie = browser.get_cookie(COOKIE)
    assert cookie is not None, "not signed in"
    return httpx.Client(base_url=console.url, cookies={COOKIE: cookie["value"]},
                        follow_redirects=False, timeout=WAIT)


def not_found_text(browser: Any, run_id: str) -> tuple[str, str]:
    message = browser.find_element(By.ID, "error-message").text.replace(run_id, "RUN")
    return browser.find_element(By.ID, "error-title").text, message


def park(console: Console, flag: Path, user: str, session: str) -> tuple[str, int]:
    """A ``browser-park`` run parked on its dead letter: ``(run id, dead letter id)``."""
    run = console.hypha.start("browser-park", {"flag": str(flag)}, user_id=user,
                              session_id=session)
    console.wait_status(run.id, "parked")
    (record,) = console.hypha.store.dead_letters(run_id=run.id)
    return run.id, int(record["id"])


# -- the pages as an operator ----------------------------------------------------------
def test_every_page_renders_for_an_operator(browser: Any, console: Console,
                                            seeded: Seeded) -> None:
    sign_in(browser, console, console.admin_token)
    assert_clean(browser)
    assert browser.find_element(By.ID, "principal").text == "admin:ops"
    # the first page: three plots drawn on the server, the queues of the real broker
    assert len(browser.find_elements(By.CSS_SELECTOR, "#plots svg.plot")) == 3
    bars = browser.find_elements(By.CSS_SELECTOR, "#plots svg.plot rect")
    assert bars and all(b.size["height"] > 0 for b in bars), "no runs drawn"
    assert "hypha.nodes" in texts(browser, "#depths code")
    assert browser.find_element(By.ID, "failing")

    visit(browser, console, "/runs")
    links = texts(browser, "#runs a.run-link")
    assert seeded.alice_run in links and seeded.bob_run in links

    # the filter form: alice's completed runs only
    browser.find_element(By.CSS_SELECTOR, "#filters input[name=user]").send_keys("alice")
    browser.find_element(By.CSS_SELECTOR, "#status option[value=completed]").click()
    browser.find_element(By.ID, "apply").click()
    wait(browser, lambda d: "user=alice" in d.current_url, "the filtered runs")
    assert_clean(browser)
    assert "status=completed" in browser.current_url
    links = texts(browser, "#runs a.run-link")
    assert seeded.alice_run in links and seeded.bob_run not in links

    # a run: its status, graph drawing, steps and timeline
    browser.find_element(By.LINK_TEXT, seeded.alice_run).click()
    wait(browser, lambda d: d.find_element(By.ID, "run-id").text == seeded.alice_run,
         "the run page")
    assert_clean(browser)
    assert browser.find_element(By.ID, "run-status").text == "completed"
    assert browser.find_element(By.ID, "timeline").get_attribute("data-live") is None
    assert timeline_rows(browser) >= 4 * STEPS
    assert len(browser.find_elements(By.CSS_SELECTOR, "#steps tbody tr")) >= STEPS
    assert browser.find_elements(By.CSS_SELECTOR, "#graph svg"), "no graph drawing"
    assert "run.completed" in texts(browser, "#timeline td.kind")

    # agents, and the agent's own page
    visit(browser, console, "/agents")
    assert seeded.agent in texts(browser, "#agents a.agent-link")
    browser.find_element(By.LINK_TEXT, seeded.agent).click()
    wait(browser, lambda d: d.find_element(By.ID, "agent-name").text == seeded.agent,
         "the agent page")
    assert_clean(browser)
    assert browser.find_element(By.ID, "agent-phase").text
    turns = " ".join(texts(browser, "#turns tbody td"))
    assert "agent." in turns, turns

    visit(browser, console, "/dead-letters")
    assert browser.find_element(By.ID, "dead-letters")
    assert browser.find_element(By.ID, "quarantined")
    visit(browser, console, "/dead-letters?all=1")


def test_a_user_sees_only_their_own_runs(browser: Any, console: Console,
                                         seeded: Seeded) -> None:
    sign_in(browser, console, console.user_token)
    assert_clean(browser)
    assert browser.find_element(By.ID, "principal").text == "user:alice"
    assert not browser.find_elements(By.ID, "depths")  # the fleet's queues: an admin's
    visit(browser, console, "/runs")
    links = texts(browser, "#runs a.run-link")
    assert seeded.alice_run in links and seeded.bob_run not in links
    assert not browser.find_elements(By.CSS_SELECTOR, "#filters input[name=user]")

    visit(browser, console, f"/runs/{seeded.alice_run}")
    assert browser.find_element(By.ID, "run-status").text == "completed"

    # bob's run is "Not found", exactly as a run that does not exist
    visit(browser, console, f"/runs/{seeded.bob_run}")
    theirs = not_found_text(browser, seeded.bob_run)
    assert seeded.bob_run not in texts(browser, "a")
    missing = f"nosuchrun{seeded.bob_run[9:]}"
    visit(browser, console, f"/runs/{missing}")
    assert not_found_text(browser, missing) == theirs
    assert theirs[0] == "Not found"
    with session_client(browser, console) as http:
        assert http.get(f"/runs/{seeded.bob_run}/live").status_code == 404
        assert http.get(f"/runs/{seeded.bob_run}").status_code == 404


def test_a_live_run_is_followed_to_its_end(browser: Any, console: Console) -> None:
    sign_in(browser, console, console.admin_token)
    run = console.hypha.start("browser-slow", {"sleep": 0.4}, user_id="alice",
                              session_id="s-live")
    console.wait_status(run.id, "running")
    visit(browser, console, f"/runs/{run.id}")
    timeline = browser.find_element(By.ID, "timeline")
    assert timeline.get_attribute("data-live"), "a running run's timeline is not live"
    assert browser.find_element(By.ID, "run-status").text == "running"
    assert browser.find_element(By.ID, "live-note")
    browser.execute_script("window.hyphaSamePage = true")  # gone once the page reloads
    first = timeline_rows(browser)

    shown = _events_shown(browser)
    assert shown is not None, "the run page shows no event count"
    seen, counts, boxes = [first], [shown], [_boxes(browser)]
    end = time.monotonic() + WAIT
    while browser.execute_script("return window.hyphaSamePage === true"):
        rows = timeline_rows(browser)
        if rows != seen[-1]:
            seen.append(rows)
        count, drawn = _events_shown(browser), _boxes(browser)
        if count is not None and count != counts[-1]:
            counts.append(count)
        if count is not None and drawn != boxes[-1]:
            boxes.append(drawn)
        if time.monotonic() > end:
            raise AssertionError(f"the page never reloaded; rows seen: {seen}\n"
                                 f"{console.worker.log()}")
        time.sleep(0.05)
    # rows arrived on the same page (server-sent events), in several batches, and the
    # run's facts (its event count) and its drawing (more boxes) moved with them
    assert len(seen) >= 3 and seen == sorted(seen), seen
    assert len(counts) >= 3 and counts == sorted(counts), counts
    assert len(boxes) >= 2 and boxes == sorted(boxes), boxes

    # the `end` event reloaded the page: the finished run, no longer live
    wait(browser, lambda d: d.find_element(By.ID, "run-status").text == "completed",
         "the completed status")
    assert_clean(browser)
    assert browser.find_element(By.ID, "timeline").get_attribute("data-live") is None
    assert not browser.find_elements(By.ID, "live-note")
    assert run.wait(timeout=WAIT) == {"naps": STEPS}
    assert timeline_rows(browser) >= seen[-1]
    assert texts(browser, "#timeline td.kind")[-1] == "run.completed"


def _events_shown(browser: Any) -> int | None:
    # read inside the page in one script: an element handle taken first can be swapped
    # out by a live update before its text is read (a stale or detached node); None
    # while the page is between documents (the reload at the run's end)
    shown = browser.execute_script(
        "const e = document.getElementById('run-events');"
        "return e ? e.textContent.trim() : null")
    return None if shown is None else int(shown)


def _boxes(browser: Any) -> int:
    return int(browser.execute_script(
        "return document.querySelectorAll('#graph g.box').length"))


def test_an_operator_redrives_a_dead_letter(browser: Any, console: Console,
                                            tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    run_id, letter = park(console, flag, user="alice", session="s-redrive")
    row = f'#dead-letters tr[data-id="{letter}"]'

    # alice sees her dead letter, without the operator's button; her POST is refused
    sign_in(browser, console, console.user_token)
    visit(browser, console, "/dead-letters")
    assert browser.find_elements(By.CSS_SELECTOR, row)
    assert not browser.find_elements(By.CSS_SELECTOR, "button.redrive")
    csrf = browser.find_element(By.CSS_SELECTOR, "form.who input[name=csrf]")
    with session_client(browser, console) as http:
        refused = http.post(f"/dead-letters/{letter}/redrive",
                            data={"csrf": csrf.get_attribute("value")})
    assert refused.status_code == 403 and "Not permitted" in refused.text

    # an operator's session, but a forged form (no CSRF token, another site): nothing done
    sign_in(browser, console, console.admin_token)
    with session_client(browser, console) as http:
        assert http.post(f"/dead-letters/{letter}/redrive").status_code == 403
        forged = http.post(f"/dead-letters/{letter}/redrive", data={"csrf": "x" * 40},
                           headers={"origin": "http://evil.example"})
        assert forged.status_code == 403 and "Form refused" in forged.text
    record = console.hypha.store.dead_letter(letter)
    assert record is not None and record["status"] == "open"
    assert console.hypha.store.get(run_id)["status"] == "parked"  # type: ignore[index]

    # the parked run's page links to its dead letter's record
    visit(browser, console, f"/runs/{run_id}")
    assert browser.find_element(By.ID, "run-status").text == "parked"
    browser.find_element(By.CSS_SELECTOR, f'#facts a[href="/dead-letters/{letter}"]').click()
    wait(browser, lambda d: d.find_element(By.ID, "dead-letter-id").text == str(letter),
         "the dead letter's record")
    assert_clean(browser)
    assert browser.find_element(By.ID, "dead-letter-run").text == run_id
    assert browser.find_element(By.ID, "dead-letter-status").text == "open"

    # the endpoint is back: the operator clicks Redrive
    flag.touch()
    visit(browser, console, "/dead-letters")
    browser.find_element(By.CSS_SELECTOR, f"{row} button.redrive").click()
    wait(browser, lambda d: "done=redriven" in d.current_url, "the redrive's redirect")
    assert_clean(browser)
    assert browser.find_element(By.ID, "notice").text == "Dead letter redriven."
    assert not browser.find_elements(By.CSS_SELECTOR, row)  # no longer open

    assert console.hypha.get_run(run_id).wait(timeout=WAIT) == {"called": True}
    events = console.hypha.get_run(run_id).events()
    (redriven,) = [e for e in events if e.kind == "run.redriven"]
    assert redriven.data["by"] == "ops" and redriven.data["dead_letter_id"] == letter
    record = console.hypha.store.dead_letter(letter)
    assert record is not None and record["status"] == "redriven"
    visit(browser, console, f"/runs/{run_id}")
    assert browser.find_element(By.ID, "run-status").text == "completed"
    assert "run.redriven" in texts(browser, "#timeline td.kind")


def test_screenshots_of_the_main_pages(browser: Any, console: Console, seeded: Seeded,
                                       tmp_path: Path, screenshots_dir: Path) -> None:
    park(console, tmp_path / "flag", user="bob", session="s-parked")  # an open dead letter to show
    sign_in(browser, console, console.admin_token)
    pages = {"overview": "/", "runs": "/runs", "run": f"/runs/{seeded.alice_run}",
             "dead-letters": "/dead-letters"}
    for name, path in pages.items():
        browser.set_window_size(1280, 720)  # the whole page, at least 720 px tall
        visit(browser, console, path)
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1280, min(int(height) + 140, 2400))
        target = screenshots_dir / f"console-{name}.png"
        assert browser.save_screenshot(str(target)), target
        data = target.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, (target, len(data))
    browser.set_window_size(1280, 900)
