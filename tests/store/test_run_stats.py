"""``EventStore.run_stats``: a window's runs per bucket, their failures and p95 duration,
the graphs that fail most; bounded, scoped; on both backends. The PostgreSQL database is
the session's, shared: each test's window is a random minute range long past (no other
test writes runs there)."""

from __future__ import annotations

import random

import pytest

from hypha_celery.store import EventStore
from tests.store.test_runs_list import Spec, insert_runs, unique


def window() -> float:
    """A start of a window no other test uses (a minute boundary, 2001 to 2016)."""
    return 1_000_000_000.0 + random.randrange(8_000_000) * 60


def spec(graph: str, status: str, created: float, took: float,
         user: str | None = None) -> Spec:
    return Spec(graph, status, user, None, created, created + took)


def test_buckets_failures_and_p95(store: EventStore) -> None:
    t0, g1, g2 = window(), unique("g1"), unique("g2")
    specs = [spec(g1, "completed", t0 + 1 + i, float(i + 1)) for i in range(20)]  # minute 0
    specs += [spec(g2, "failed", t0 + 61, 5.0), spec(g2, "failed", t0 + 70, 7.0),
              spec(g1, "failed", t0 + 80, 1.0), spec(g1, "completed", t0 + 90, 2.0),
              spec(g1, "queued", t0 + 100, 0.0)]  # minute 1; the queued run has not ended
    insert_runs(store, specs)
    stats = store.run_stats(t0, t0 + 180, width=60.0)
    first, second, third = stats.buckets
    assert (first.start, first.runs, first.ended, first.failed) == (t0, 20, 20, 0)
    assert first.p95 == 19.0  # nearest rank: the 19th of 1..20 s
    assert first.failure_rate == 0.0
    assert (second.runs, second.ended, second.failed) == (5, 4, 3)
    assert second.p95 == 7.0 and second.failure_rate == 0.75
    assert (third.start, third.runs, third.p95, third.failure_rate) == (t0 + 120, 0, None, None)
    assert [(g.graph_id, g.runs, g.failed) for g in stats.failing] == [(g2, 2, 2), (g1, 23, 1)]
    assert stats.failing[0].last_failed_at == t0 + 77.0
    assert (stats.counted, stats.sampled) == (25, False)
    assert stats.p95 == 19.0  # of 24 ended (1..20 s, 1, 2, 5, 7): rank 23 is 19 s


def test_bounded_by_the_newest_runs_and_the_graph_count(store: EventStore) -> None:
    t0 = window()
    graphs = [unique("g") for _ in range(4)]
    insert_runs(store, [spec(g, "failed", t0 + i, 1.0) for i, g in enumerate(graphs * 3)])
    stats = store.run_stats(t0, t0 + 60, graphs=2, limit=5)
    assert (stats.counted, stats.sampled) == (5, True)
    assert stats.buckets[0].runs == 5 and len(stats.failing) == 2
    # the newest five: created at t0+7 .. t0+11, i.e. graphs 3, 0, 1, 2, 3
    assert [(g.graph_id, g.failed) for g in stats.failing] == [
        (graphs[3], 2), (min(graphs[:3]), 1)]  # most failed, then by name
    assert store.run_stats(t0, t0 + 60, graphs=0).failing == []


def test_scoped_to_the_owner(store: EventStore) -> None:
    t0, g, alice, bob = window(), unique("g"), unique("alice"), unique("bob")
    insert_runs(store, [spec(g, "failed", t0 + 1, 1.0, alice),
                        spec(g, "completed", t0 + 2, 1.0, bob),
                        spec(g, "completed", t0 + 3, 1.0, None)])
    assert store.run_stats(t0, t0 + 60).counted == 3
    mine = store.scoped(alice).run_stats(t0, t0 + 60)
    assert (mine.counted, mine.buckets[0].failed) == (1, 1)
    theirs = store.scoped(bob).run_stats(t0, t0 + 60)
    assert (theirs.counted, theirs.buckets[0].failed, theirs.failing) == (1, 0, [])


@pytest.mark.parametrize(("since", "until", "width", "kw"), [
    (0.0, 3600.0, 0.0, {}), (10.0, 10.0, 60.0, {}), (0.0, 86_401 * 60.0, 60.0, {}),
    (0.0, 60.0, 60.0, {"graphs": 51}), (0.0, 60.0, 60.0, {"limit": 0}),
    (0.0, 60.0, 60.0, {"limit": 20_001}),
])
def test_an_unbounded_window_is_refused(store: EventStore, since: float, until: float,
                                        width: float, kw: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="at most|must be"):
        store.run_stats(since, until, width=width, **kw)
