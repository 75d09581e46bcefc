"""``hypha_sessions_opened{window}``: sessions opened in the last hour and day, read from
a real store (SQLite and PostgreSQL) on scrape."""

from __future__ import annotations

import uuid
from typing import Any

from celery import Celery
from prometheus_client import CollectorRegistry

from hypha_celery import Finish, Graph, Next
from hypha_celery.metrics import HyphaCollector, names
from tests.runtime.support import WAIT, running


def sample(registry: CollectorRegistry, window: str) -> Any:
    return registry.get_sample_value(names.SESSIONS_OPENED, {"window": window})


def test_opened_sessions_are_counted_per_window(store_url: str) -> None:
    app = Celery("sessions-gauge", broker="memory://")
    graph = Graph("s_echo", {"w": lambda s, i: {"v": i}},
                  lambda c: Next("w", c.input) if c.step == 0 else Finish(c.state["v"]))
    with running(store_url) as h:
        h.register(graph)
        registry = CollectorRegistry()
        registry.register(HyphaCollector(app, lambda: [], h.store))
        before = {w: sample(registry, w) for w in ("1h", "24h")}
        assert None not in before.values()  # both series, even with no session
        user = uuid.uuid4().hex[:8]
        for session in ("a", "a", "b"):  # two sessions: a second run opens none
            h.start("s_echo", 1, user_id=user, session_id=session).wait(WAIT)
        h.start("s_echo", 1, user_id=user).wait(WAIT)  # no session
        # (PostgreSQL: the session's database, shared: at least ours were added)
        assert sample(registry, "1h") >= before["1h"] + 2
        assert sample(registry, "24h") >= before["24h"] + 2
    app.close()
