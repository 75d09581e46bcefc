"""What the console tests share: an embedded Hypha with graphs that hold, park or
quarantine, a console app over it, and signed-in clients."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.testclient import TestClient

from hypha_celery import Context, Finish, Graph, Hypha, Next, Principal
from hypha_celery.console import ConsoleConfig, create_app

GATE = threading.Event()
#: Text that must never reach a page while content is hidden.
SECRET = "s3cret-prompt-text"


def _steps(ctx: Context) -> Next | Finish:
    if ctx.step < 2:
        return Next("work", ctx.input)
    return Finish({"echo": ctx.state.get("echo")})


def work(state: dict[str, Any], inp: Any) -> dict[str, Any]:
    if isinstance(inp, dict) and inp.get("hold"):
        GATE.wait(15)
    return {"echo": inp, "count": int(state.get("count", 0)) + 1}


ECHO = Graph(id="echo", nodes={"work": work}, decision_policy=_steps)


@dataclass
class Tokens:
    admin: str
    alice: str
    bob: str
    alice_id: str
    bob_id: str


def tokens() -> Tokens:
    tag = uuid.uuid4().hex[:8]
    return Tokens("a" * 8 + uuid.uuid4().hex, "b" * 8 + uuid.uuid4().hex,
                  "c" * 8 + uuid.uuid4().hex, f"alice-{tag}", f"bob-{tag}")


def config(t: Tokens, **kw: Any) -> ConsoleConfig:
    return ConsoleConfig(tokens={t.admin: Principal.admin("ops"),
                                 t.alice: Principal.user(t.alice_id),
                                 t.bob: Principal.user(t.bob_id)}, **kw)


def app_for(hypha: Hypha, t: Tokens, **kw: Any) -> Any:
    return create_app(hypha, config(t, **kw))


def client(app: Any, token: str | None = None) -> TestClient:
    """A browser-like client, signed in with ``token`` through the login form."""
    c = TestClient(app, raise_server_exceptions=False, base_url="http://testserver",
                   headers={"accept": "text/html"})
    if token is not None:
        r = c.post("/login", data={"token": token, "next": "/runs"}, follow_redirects=False)
        assert r.status_code == 303, r.text
    return c


def csrf(c: TestClient, page: str = "/dead-letters") -> str:
    import re

    found = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get(page).text)
    assert found, "the page has a form with a CSRF token"
    return found.group(1)

