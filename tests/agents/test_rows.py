"""The stale-agent read of the recovery sweep (``rows.stale``) on every store backend."""

from __future__ import annotations

import uuid

from hypha_celery.agents import rows
from hypha_celery.store import EventStore
from hypha_celery.store import agents as table


def test_a_row_that_is_not_an_agent_doc_does_not_stop_the_stale_sweep(
        store: EventStore) -> None:
    name, inc = f"x-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    assert table.create(store, name, inc, "K", "idle", {"n": 0}, {})
    with store.transaction() as tx:
        table.update(tx, name, inc, {"not": "an agent doc"}, "busy", 1)
    try:
        found = rows.stale(store, before=4e9, limit=10_000)
        assert name in [n for n, *_ in table.stale(store, 4e9, 10_000)]
        assert name not in [n for n, _, _ in found]
    finally:
        with store.transaction() as tx:
            table.delete(tx, name, inc)
