"""The console's first page (``/``): what an operator opens it for. Over the last
:data:`WINDOW` seconds, by the minute runs were created: runs a minute, the failure
rate and the p95 duration of those that ended, as small plots drawn here
(:mod:`.plots`); the graphs with the most failed runs (at most :data:`GRAPHS_SHOWN`);
what waits for a person (open dead letters, quarantined, parked and waiting runs,
each counted up to :data:`HELD_COUNTED`); and, for an admin, the broker's queue depths.

The figures come from the store's :meth:`~hypha_celery.store.EventStore.run_stats`
(bounded: the newest 20,000 runs of the hour at most), narrowed to the signed-in
user's runs; the queue depths from :func:`hypha_celery.metrics.queue_depths`, the
``hypha metrics`` code (a count per queue, never a message)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hypha_celery.console import plots
from hypha_celery.console.plots import Plot, PlotKind
from hypha_celery.metrics import queue_depths
from hypha_celery.store import RunFilter, RunStats

if TYPE_CHECKING:
    from hypha_celery.client.hypha import Hypha
    from hypha_celery.client.scoped import ScopedHypha

__all__ = ["GRAPHS_SHOWN", "HELD_COUNTED", "WIDTH", "WINDOW", "Depths", "Held", "Overview",
           "overview"]

log = logging.getLogger("hypha.console")

#: The window the first page sums up, in seconds, and the width of a bucket.
WINDOW = 3600.0
WIDTH = 60.0
#: Failing graphs listed at most.
GRAPHS_SHOWN = 10
#: Held runs and open dead letters are counted up to this many ("100+").
HELD_COUNTED = 100


@dataclass(frozen=True, slots=True)
class Depths:
    """The broker's queue depths (admins only), or why there are none."""

    queues: dict[str, int]
    error: str = ""


@dataclass(frozen=True, slots=True)
class Held:
    """What waits for a person: a count (``more``: at least that many) and its page."""

    name: str
    count: int
    more: bool
    link: str


@dataclass(frozen=True, slots=True)
class Overview:
    stats: RunStats
    plots: list[tuple[str, str, str]]  # (caption, headline figure, svg)
    held: list[Held]
    depths: Depths | None


def _percent(rate: float) -> str:
    return f"{rate * 100:.0f} %"


def _plots(stats: RunStats) -> list[tuple[str, str, str]]:
    runs = [float(b.runs) for b in stats.buckets]
    rates = [b.failure_rate for b in stats.buckets]
    p95s = [b.p95 for b in stats.buckets]
    ended = sum(b.ended for b in stats.buckets)
    failed = sum(b.failed for b in stats.buckets)
    span = f"{WINDOW / 60:.0f} min"
    return [
        ("Runs a minute", f"{stats.counted} in the hour",
         plots.svg(Plot("runs a minute", runs, lambda v: f"{v:.0f} runs", span=span))),
        ("Failure rate", f"{_percent(failed / ended)} of {ended} ended" if ended
         else "none ended",
         plots.svg(Plot("failure rate", rates, _percent, PlotKind.LINE, span, top=0.1))),
        ("p95 duration", "" if stats.p95 is None else f"{plots.duration(stats.p95)} "
         "over the hour",
         plots.svg(Plot("p95 duration", p95s, plots.duration, PlotKind.LINE, span))),
    ]


def _held(hypha: ScopedHypha) -> list[Held]:
    letters = hypha.dead_letters(limit=HELD_COUNTED + 1)
    out = [Held("open dead letters", min(len(letters), HELD_COUNTED),
                len(letters) > HELD_COUNTED, "/dead-letters")]
    for status, name in (("quarantined", "quarantined runs"), ("parked", "parked runs"),
                         ("waiting_human", "runs waiting for a review")):
        found = hypha.list_runs(RunFilter(status=status), limit=HELD_COUNTED + 1)
        out.append(Held(name, min(len(found), HELD_COUNTED), len(found) > HELD_COUNTED,
                        f"/runs?status={status}"))
    return out


def depths(hypha: Hypha) -> Depths:
    """Messages waiting in each of the app's queues; a broker that does not answer is
    said, not raised (the page still shows the rest)."""
    try:
        return Depths(queue_depths(hypha.celery, hypha.queues()))
    except Exception as exc:  # any broker error: the page shows the rest
        log.warning("console: queue depths unavailable: %s", type(exc).__name__)
        return Depths({}, f"the broker did not answer ({type(exc).__name__})")


def overview(hypha: ScopedHypha, app: Hypha, now: float) -> Overview:
    """The first page's figures as ``hypha``'s principal sees them (queue depths are
    the fleet's: an admin's only), for the hour before ``now``."""
    stats = hypha.store.run_stats(now - WINDOW, now, width=WIDTH, graphs=GRAPHS_SHOWN)
    return Overview(stats, _plots(stats), _held(hypha),
                    depths(app) if hypha.principal.is_admin else None)
