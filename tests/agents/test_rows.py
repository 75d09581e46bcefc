"""The agent row on every store backend: the stale-agent read of the recovery sweep
(``rows.stale``), and the session column parsed on use and written only when changed."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from hypha_celery.agents import machine, rows
from hypha_celery.agents.options import Limits
from hypha_celery.store import EventStore
from hypha_celery.store import agents as table
from hypha_celery.store.schema import agents


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


def _started(store: EventStore) -> str:
    doc = machine.new_doc(f"s-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex, "K", "mock",
                          Limits(), {"n": 0}, {"scripts": [1, 2]}, False)
    assert rows.create(store, doc)
    return doc.name


def _mark(atx: rows.AgentTx) -> None:
    """Put a marker in the session column under the lock: a flush that writes the session
    overwrites it."""
    atx.tx.conn.execute(sa.update(agents).where(agents.c.name == atx.name)
                        .values(session={"marker": True}))


def _session(store: EventStore, name: str) -> object:
    found = rows.read(store, name)
    assert found is not None
    return found.session


@pytest.mark.parametrize(("touch", "written"), [
    ("nothing", False), ("read", False), ("read, then equal", False),
    ("equal, unread", True), ("new", True)])
def test_the_session_column_is_parsed_on_use_and_written_only_when_it_changed(
        store: EventStore, touch: str, written: bool) -> None:
    name = _started(store)
    with rows.locked(store, name) as atx:
        assert not atx.doc.stored_session.parsed  # the lock read its text only
        if touch.startswith("read"):
            assert atx.doc.session == {"scripts": [1, 2]}
        if touch.endswith("equal") or touch == "equal, unread":
            # an equal value is known equal only when the column was parsed anyway
            atx.doc.session = {"scripts": [1, 2]}
        elif touch == "new":
            atx.doc.session = {"scripts": [2]}
        atx.doc.state = {"n": 1}
        _mark(atx)
    expected = {"scripts": [2] if touch == "new" else [1, 2]}
    assert _session(store, name) == (expected if written else {"marker": True})
    assert rows.read(store, name) is not None and rows.read(store, name).state == {"n": 1}
