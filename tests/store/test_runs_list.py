"""``EventStore.list_runs``: filters, keyset paging newest first, scoping; on both
backends. The PostgreSQL database is the test session's, shared: every test lists its
own graph ids and users only and never assumes the table is empty."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from hypha_celery.events.fold import new_view
from hypha_celery.store import EventStore, RunFilter, RunRow
from hypha_celery.store.projection import columns_of, doc_of
from hypha_celery.store.schema import runs

STATUSES = ("completed", "failed", "cancelled")  # terminal: no supervisor touches them


@dataclass(frozen=True)
class Spec:
    graph_id: str
    status: str
    user_id: str | None
    session_id: str | None
    created_at: float
    updated_at: float


def insert_runs(store: EventStore, specs: Iterable[Spec], seq: int = 3) -> list[str]:
    """Run rows written at once (executemany; no events: listings read the rows only).
    Their run ids, in insertion order (the last is the newest)."""
    store.ensure_schema()
    rows, ids = [], []
    for spec in specs:
        run_id = uuid.uuid4().hex
        view = new_view(run_id)
        view.update(graph_id=spec.graph_id, status=spec.status, user_id=spec.user_id,
                    session_id=spec.session_id, created_at=spec.created_at,
                    updated_at=spec.updated_at)
        rows.append({**columns_of(view), "run_id": run_id, "seq": seq, "doc": doc_of(view)})
        ids.append(run_id)
    with store.engine.begin() as conn:
        for i in range(0, len(rows), 5000):
            conn.execute(runs.insert(), rows[i:i + 5000])
    return ids


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass(frozen=True)
class World:
    g1: str
    g2: str
    u1: str
    u2: str
    t0: float
    ids: list[str]
    specs: list[Spec]

    def expected(self, keep: Callable[[Spec], bool]) -> list[str]:
        """The ids of the runs ``keep`` keeps, newest first."""
        return [i for i, s in reversed(list(zip(self.ids, self.specs, strict=True)))
                if keep(s)]


@pytest.fixture
def world(store: EventStore) -> World:
    """24 runs of two graphs, three users (one None), two sessions, three statuses,
    created one second apart from t0, each updated 100 s after it was created."""
    g1, g2, u1, u2 = unique("g1"), unique("g2"), unique("u1"), unique("u2")
    t0 = 1_700_000_000.0
    specs = [Spec(graph_id=(g1, g2)[i % 2], status=STATUSES[i % 3],
                  user_id=(u1, u2, None)[i % 3],
                  session_id=None if i % 3 == 2 else ("s1", "s2")[i // 12],
                  created_at=t0 + i, updated_at=t0 + i + 100) for i in range(24)]
    return World(g1, g2, u1, u2, t0, insert_runs(store, specs), specs)


def listed(store: EventStore, **filters: Any) -> list[str]:
    return [r.run_id for r in store.list_runs(RunFilter(**filters), limit=1000)]


def test_each_filter_newest_first(store: EventStore, world: World) -> None:
    w, t = world, world.t0
    assert sorted(listed(store, graph_id=w.g1) + listed(store, graph_id=w.g2)) == \
        sorted(w.ids)
    assert listed(store, graph_id=w.g1) == w.expected(lambda s: s.graph_id == w.g1)
    assert listed(store, user_id=w.u1) == w.expected(lambda s: s.user_id == w.u1)
    assert listed(store, user_id=w.u2, session_id="s2") == w.expected(
        lambda s: s.user_id == w.u2 and s.session_id == "s2")
    assert listed(store, graph_id=w.g2, status="failed") == w.expected(
        lambda s: s.graph_id == w.g2 and s.status == "failed")
    for status in STATUSES:
        got = [r for r in listed(store, status=status) if r in w.ids]
        assert got == w.expected(lambda s, st=status: s.status == st)  # type: ignore[misc]
    assert listed(store, graph_id=w.g1, created_since=t + 10, created_until=t + 20) == \
        w.expected(lambda s: s.graph_id == w.g1 and t + 10 <= s.created_at < t + 20)
    assert listed(store, graph_id=w.g2, updated_since=t + 115) == w.expected(
        lambda s: s.graph_id == w.g2 and s.updated_at >= t + 115)
    assert listed(store, graph_id=w.g2, updated_until=t + 105) == w.expected(
        lambda s: s.graph_id == w.g2 and s.updated_at < t + 105)
    assert listed(store, graph_id=unique("none")) == []


def test_rows_are_content_free(store: EventStore, world: World) -> None:
    (row,) = store.list_runs(RunFilter(graph_id=world.g1), limit=1)
    assert isinstance(row, RunRow)
    assert row.run_id == world.expected(lambda s: s.graph_id == world.g1)[0]
    assert set(row.as_dict()) == {"run_id", "graph_id", "status", "user_id", "session_id",
                                  "seq", "created_at", "updated_at"}
    assert row.seq == 3


def test_paging_walks_every_run_once(store: EventStore, world: World) -> None:
    for limit in (1, 5, 7, 12, 50):
        seen: list[str] = []
        before = None
        while True:
            page = store.list_runs(RunFilter(graph_id=world.g1), limit=limit, before=before)
            seen += [r.run_id for r in page]
            if len(page) < limit:
                break
            before = page[-1].id
        assert seen == world.expected(lambda s: s.graph_id == world.g1)


def test_a_scoped_store_lists_its_owners_runs_only(store: EventStore, world: World) -> None:
    scoped = store.scoped(world.u1)
    mine = world.expected(lambda s: s.user_id == world.u1)
    assert [r.run_id for r in scoped.list_runs(RunFilter(graph_id=world.g1), limit=1000)
            ] == [i for i in listed(store, graph_id=world.g1) if i in mine]
    assert scoped.list_runs(RunFilter(user_id=world.u2)) == []
    everything = {r.run_id for r in scoped.list_runs(limit=1000)}
    assert set(mine) <= everything
    assert not (set(world.ids) - set(mine)) & everything


@pytest.mark.parametrize("limit", [0, 1001])
def test_limit_is_bounded(store: EventStore, limit: int) -> None:
    with pytest.raises(ValueError, match="limit"):
        store.list_runs(limit=limit)
