"""Bad input gets a clear page, never a traceback, and changes nothing: filter values
that are not valid, a fuzzed query string, ids that do not exist, a page that fails."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypha_celery import Hypha
from tests.console.support import Tokens, app_for, client

BAD = [("status", "bogus", "status: not one of"), ("before", "x", "before: not a whole"),
       ("before", "-1", "before: not a whole"), ("limit", "0", "limit: not a whole"),
       ("limit", "100000", "limit: not a whole"),
       ("since", "yesterday", "since: &#39;yesterday&#39; is neither"),
       ("until", "nan", "until: &#39;nan&#39; is not a time"),
       ("graph", "x" * 300, "graph: not an id"), ("user", "a\x00b", "user: not an id")]


@pytest.mark.parametrize(("param", "value", "message"), BAD)
def test_a_bad_filter_is_a_400_page(hypha: Hypha, t: Tokens, param: str, value: str,
                                    message: str) -> None:
    r = client(app_for(hypha, t), t.admin).get("/runs", params={param: value})
    assert r.status_code == 400 and message in r.text
    assert "Traceback" not in r.text and r.headers["content-type"].startswith("text/html")


@pytest.fixture
def admin(hypha: Hypha, t: Tokens) -> Any:
    run = hypha.start("echo", {"n": 1})
    hypha.get_run(run.id).wait(15)
    return client(app_for(hypha, t), t.admin), run.id


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=st.dictionaries(st.sampled_from(["graph", "status", "user", "session", "since",
                                               "until", "before", "limit", "after", "steps",
                                               "fixture", "all", "done", "next", "x"]),
                              _TEXT, max_size=5))
def test_a_fuzzed_query_string_never_breaks_a_page(admin: Any, params: dict[str, str]
                                                   ) -> None:
    c, run_id = admin
    for path in ("/runs", f"/runs/{run_id}", "/dead-letters", "/agents", "/login"):
        r = c.get(path, params=params)
        assert r.status_code in (200, 400), (path, params, r.status_code)
        assert "Traceback" not in r.text and "<h1" in r.text


@pytest.mark.parametrize("path", ["/runs/nope", "/runs/nope/live", "/agents/nobody",
                                  "/no-such-page", "/runs/%00", "/agents/a%2Fb"])
def test_unknown_things_are_404_pages(admin: Any, path: str) -> None:
    c, _ = admin
    r = c.get(path)
    assert r.status_code == 404 and "Not found" in r.text and "Traceback" not in r.text


def test_a_failing_page_is_a_500_page_without_the_error(
        hypha: Hypha, t: Tokens, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    c = client(app_for(hypha, t), t.admin)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the secret detail")

    monkeypatch.setattr(type(hypha.store), "list_runs", broken)
    r = c.get("/runs")
    assert r.status_code == 500 and "Something went wrong" in r.text
    assert "the secret detail" not in r.text and "Traceback" not in r.text
    assert "RuntimeError" in caplog.text and "the secret detail" not in caplog.text


def test_wrong_methods_and_missing_tokens(hypha: Hypha, t: Tokens) -> None:
    c = client(app_for(hypha, t), t.admin)
    assert c.get("/dead-letters/1/redrive").status_code == 405
    assert c.post("/quarantine/x/release").status_code == 403  # no CSRF token
