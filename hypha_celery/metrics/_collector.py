"""Gauges read when Prometheus scrapes: queue depths and agents by phase.

Read live in the process that serves ``/metrics`` (the worker's main process, or
``hypha metrics --serve``), never recorded: a scrape costs one broker round trip per
queue and one ``GROUP BY`` on the agents' table."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hypha_celery.metrics import names
from hypha_celery.metrics._client import core
from hypha_celery.metrics._depth import queue_depths
from hypha_celery.store import EventStore
from hypha_celery.store import agents as agent_rows

log = logging.getLogger(__name__)


class HyphaCollector:
    """A custom collector: ``hypha_queue_depth{queue}`` of the Celery app ``app``'s
    ``queues()``, and ``hypha_agents{phase}`` of ``store`` (when given). A broker or
    store that does not answer leaves its gauge out of that scrape (logged). ``before``
    runs first on each scrape (``export``: the zero series of graphs registered since)."""

    def __init__(self, app: Any, queues: Callable[[], Iterable[str]],
                 store: EventStore | None = None,
                 before: Callable[[], None] | None = None) -> None:
        self.app, self.queues, self.store, self.before = app, queues, store, before

    def collect(self) -> Iterator[Any]:
        if self.before is not None:
            self.before()
        families = core()
        try:
            depths = queue_depths(self.app, self.queues())
        except Exception as exc:  # a scrape never fails on a broker hiccup
            log.warning("hypha metrics: queue depths unavailable: %s", type(exc).__name__)
        else:
            depth = families.GaugeMetricFamily(names.QUEUE_DEPTH, "Messages waiting in a queue",
                                           labels=["queue"])
            for queue, n in depths.items():
                depth.add_metric([queue], n)
            yield depth
        if self.store is not None:
            yield from self._agents(families)

    def _agents(self, families: Any) -> Iterator[Any]:
        assert self.store is not None
        try:
            phases = agent_rows.phases(self.store)
        except Exception as exc:
            log.warning("hypha metrics: agents unavailable: %s", type(exc).__name__)
            return
        gauge = families.GaugeMetricFamily(names.AGENTS, "Live agents by phase", labels=["phase"])
        for phase, n in sorted(phases.items()):
            gauge.add_metric([phase], n)
        yield gauge
