"""What the runs of a time window add up to, for the console's first page: runs created
per bucket (a minute), how many of them finished and failed, the p95 of their durations,
and the graphs with the most failed runs.

Bounded whatever the rate: the figures come from the newest :data:`MAX_SAMPLE` runs
created in the window (the creation-time index serves them, newest first), aggregated
in the database in three queries, so what comes back is a few rows per bucket and at
most :data:`MAX_GRAPHS` graph rows. A run counts in the bucket of the minute it was
*created*; its duration is ``updated_at - created_at`` once it has ended (the time of
its last event), so a run still going counts among the runs but not yet in the failure
rate or the durations.
The p95 is exact (nearest rank, by window functions both SQLite and PostgreSQL have)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from hypha_celery.events import TERMINAL_STATUSES
from hypha_celery.store.engine import Engines
from hypha_celery.store.projection import owned
from hypha_celery.store.schema import runs

__all__ = ["MAX_BUCKETS", "MAX_GRAPHS", "MAX_SAMPLE", "Bucket", "GraphFailures", "RunStats"]

#: Runs a window's figures are computed from at most (the newest created in it).
MAX_SAMPLE = 20_000
#: Buckets a window is cut into at most.
MAX_BUCKETS = 1440
#: Graph rows (most failed runs first) at most.
MAX_GRAPHS = 50

_ENDED = tuple(sorted(str(s) for s in TERMINAL_STATUSES))


@dataclass(frozen=True, slots=True)
class Bucket:
    """The runs created in ``[start, start + width)``."""

    start: float
    runs: int
    ended: int
    failed: int
    #: The 95th percentile (nearest rank) of the ended runs' durations, in seconds.
    p95: float | None

    @property
    def failure_rate(self) -> float | None:
        """Failed among the ended runs (None: none ended)."""
        return self.failed / self.ended if self.ended else None


@dataclass(frozen=True, slots=True)
class GraphFailures:
    """A graph's runs created in the window, with at least one failed."""

    graph_id: str
    runs: int
    failed: int
    last_failed_at: float


@dataclass(frozen=True, slots=True)
class RunStats:
    since: float
    until: float
    width: float
    #: Every bucket of the window, oldest first (empty ones included).
    buckets: list[Bucket]
    #: Graphs with failed runs, most failed first.
    failing: list[GraphFailures]
    #: The 95th percentile (nearest rank) of every ended run's duration in the window.
    p95: float | None
    #: Runs the figures come from; ``sampled``: the window had more (only the newest
    #: :data:`MAX_SAMPLE` are counted).
    counted: int
    sampled: bool


def _sample(since: float, until: float, owner: str | None, limit: int) -> Any:
    """The newest ``limit`` runs created in the window: id, graph, status, created,
    duration (None until ended)."""
    c = runs.c
    ended = c.status.in_(_ENDED)
    duration = sa.case((ended, c.updated_at - c.created_at), else_=sa.null())
    q = sa.select(c.graph_id, c.status, c.created_at, c.updated_at,
                  duration.label("duration"))
    q = owned(q, owner).where(c.created_at >= since, c.created_at < until)
    return q.order_by(c.created_at.desc()).limit(limit).subquery("sample")


def _index(dialect: str, sample: Any, since: float, width: float) -> Any:
    """The bucket of a row: ``floor((created_at - since) / width)`` (SQLite's cast
    truncates, which is the floor of a value >= 0; PostgreSQL's rounds)."""
    offset = (sample.c.created_at - since) / width
    if dialect == "postgresql":
        offset = sa.func.floor(offset)
    return sa.cast(offset, sa.Integer)


class Stats(Engines):
    """:meth:`run_stats`, narrowed to :attr:`owner`'s runs on a scoped store."""

    def run_stats(self, since: float, until: float, *, width: float = 60.0,
                  graphs: int = 10, limit: int = MAX_SAMPLE) -> RunStats:
        """The runs created in ``[since, until)`` in buckets of ``width`` seconds (at
        most :data:`MAX_BUCKETS`), and up to ``graphs`` graphs with failed runs (at most
        :data:`MAX_GRAPHS`), from the newest ``limit`` runs (at most :data:`MAX_SAMPLE`)."""
        if not (width > 0 and until > since and (until - since) / width <= MAX_BUCKETS):
            raise ValueError(f"a window of at most {MAX_BUCKETS} buckets, not "
                             f"[{since}, {until}) by {width}")
        if not (0 <= graphs <= MAX_GRAPHS and 1 <= limit <= MAX_SAMPLE):
            raise ValueError(f"graphs must be 0 to {MAX_GRAPHS} and limit 1 to {MAX_SAMPLE}")
        self.ensure_schema()
        sample = _sample(since, until, self.owner, limit)
        with self.reader.connect() as conn:
            counts = conn.execute(self._counts(sample, since, width)).all()
            ranks = conn.execute(self._p95(sample, since, width)).all()
            failing = conn.execute(_failing(sample, graphs)).all() if graphs else []
        by_index = {int(r.i): r for r in counts}
        p95s = {int(r.i): float(r.duration) for r in ranks if r.of_bucket}
        whole = next((float(r.duration) for r in ranks if r.of_window), None)
        buckets = []
        for i in range(int(-(-(until - since) // width))):
            row = by_index.get(i)
            buckets.append(Bucket(since + i * width, int(row.runs) if row else 0,
                                  int(row.ended or 0) if row else 0,
                                  int(row.failed or 0) if row else 0,
                                  p95s.get(i)))
        counted = sum(b.runs for b in buckets)
        return RunStats(since, until, width, buckets,
                        [GraphFailures(r.graph_id, int(r.runs), int(r.failed),
                                       float(r.last_failed_at)) for r in failing],
                        whole,
                        counted, counted >= limit)

    def _counts(self, sample: Any, since: float, width: float) -> Any:
        i = _index(self.dialect, sample, since, width).label("i")
        failed = sa.case((sample.c.status == "failed", 1), else_=0)
        ended = sa.case((sample.c.duration.is_not(None), 1), else_=0)
        return sa.select(i, sa.func.count().label("runs"), sa.func.sum(ended).label("ended"),
                         sa.func.sum(failed).label("failed")).group_by(i)

    def _p95(self, sample: Any, since: float, width: float) -> Any:
        """The ended durations of nearest rank ``ceil(0.95 n)`` (the one row with
        ``0.95 n <= rank < 0.95 n + 1``), per bucket and of the whole window, in one
        pass: rows ``(i, duration, of_bucket, of_window)``."""
        i = _index(self.dialect, sample, since, width).label("i")
        by_duration = sample.c.duration
        ranked = sa.select(
            i, by_duration,
            sa.func.row_number().over(partition_by=i, order_by=by_duration).label("rank"),
            sa.func.count().over(partition_by=i).label("n"),
            sa.func.row_number().over(order_by=by_duration).label("rank_all"),
            sa.func.count().over().label("n_all"),
        ).where(by_duration.is_not(None)).subquery("ranked")
        r = ranked.c
        of_bucket = sa.and_(r.rank >= 0.95 * r.n, r.rank < 0.95 * r.n + 1)
        of_window = sa.and_(r.rank_all >= 0.95 * r.n_all, r.rank_all < 0.95 * r.n_all + 1)
        return sa.select(r.i, r.duration, of_bucket.label("of_bucket"),
                         of_window.label("of_window")).where(sa.or_(of_bucket, of_window))


def _failing(sample: Any, limit: int) -> Any:
    is_failed = sample.c.status == "failed"
    failed = sa.func.sum(sa.case((is_failed, 1), else_=0)).label("failed")
    last = sa.func.max(sa.case((is_failed, sample.c.updated_at), else_=sa.null()))
    return (sa.select(sample.c.graph_id, sa.func.count().label("runs"), failed,
                      last.label("last_failed_at"))
            .group_by(sample.c.graph_id)
            .having(sa.func.sum(sa.case((is_failed, 1), else_=0)) > 0)
            .order_by(failed.desc(), sample.c.graph_id).limit(limit))
