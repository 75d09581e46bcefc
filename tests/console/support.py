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


def quarantined(lib: Hypha) -> str:
    """An effect run whose worker died after committing ``node.execution.started``,
    quarantined by a sweep (``tests/cli/test_recovery.py``'s, for a store other tests
    share: the sweep's decision about this run is the one checked). Closes ``lib``'s
    worker, as a dead one."""
    import time

    from hypha_celery import RecoveryPolicy, Settings
    from hypha_celery.beat.supervisor import sweep
    from hypha_celery.runtime import failures
    from hypha_celery.runtime.coordinator import coordinate
    from hypha_celery.runtime.lanes import kickoff_id
    from hypha_celery.runtime.protocol import Kickoff, NodeMessage
    from tests.cli import recovery_app
    from tests.runtime.support import wait_until

    run = lib.start("effect")
    wait_until(lambda: lib.store.get(run.id)["status"] == "completed", what="a first run")
    run = lib.start("effect")  # driven by hand: its messages are lost
    lib.close()
    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=lib.settings.store_url, embedded=False))
    h.register(recovery_app.EFFECT)
    try:
        coordinate(h._rt, Kickoff(run.id, kickoff_id(run.id)))
        env = NodeMessage(run.id, f"{run.id}.1", "send")
        assert failures.begin_effect(h._rt, env, 1, "gone:1")
        decisions = sweep(h._rt, now=time.time() + 80, policy=RecoveryPolicy(grace=0.1))
        assert {"run_id": run.id, "action": "quarantined"}.items() <= next(
            d for d in decisions if d["run_id"] == run.id).items()
    finally:
        h.close()
    return run.id
