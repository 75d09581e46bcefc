"""Gauges read when Prometheus scrapes: queue depths, agents by phase, the message bus,
recovery cases, sessions opened, quarantined MCP tools.

Read live in the process that serves ``/metrics`` (the worker's main process, or
``hypha metrics --serve``), never recorded: a scrape costs one broker round trip per
queue, one ``GROUP BY`` on the agents' table, two reads of the bus's (its live
messages by recipient kind and status, the fullest queue's counters), one ``GROUP BY``
of live runs by their recovery case's status, two counts of sessions and one ``GROUP BY``
of the MCP baselines by server."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hypha_celery.events.status import CaseStatus
from hypha_celery.metrics import names
from hypha_celery.metrics._client import core
from hypha_celery.metrics._depth import queue_depths
from hypha_celery.store import EventStore
from hypha_celery.store import agents as agent_rows
from hypha_celery.store import bus as bus_rows

log = logging.getLogger(__name__)


#: The windows of ``hypha_sessions_opened``: label, seconds.
SESSION_WINDOWS = (("1h", 3600.0), ("24h", 86400.0))


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
            yield from self._bus(families)
            yield from self._cases(families)
            yield from self._sessions(families)
            yield from self._mcp(families)

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

    def _bus(self, families: Any) -> Iterator[Any]:
        """``hypha_bus_messages{recipient_kind, status}`` (live messages),
        ``hypha_bus_oldest_age_seconds{recipient_kind}`` and
        ``hypha_bus_fullest_queue{measure}`` (``messages`` / ``bytes`` of the fullest
        queue, against ``BusLimits``); every kind and status present, at 0 when none."""
        assert self.store is not None
        try:
            depths = bus_rows.depths(self.store)
            count, nbytes = bus_rows.fullest(self.store)
        except Exception as exc:
            log.warning("hypha metrics: bus unavailable: %s", type(exc).__name__)
            return
        now = time.time()
        found = {(d.to_kind, d.status): d for d in depths}
        messages = families.GaugeMetricFamily(
            names.BUS_MESSAGES, "Live bus messages by recipient kind and status",
            labels=["recipient_kind", "status"])
        age = families.GaugeMetricFamily(
            names.BUS_OLDEST_AGE, "Age of the oldest live bus message by recipient kind",
            labels=["recipient_kind"])
        for kind in bus_rows.RECIPIENT_KINDS:
            oldest = [d.oldest for s in bus_rows.LIVE if (d := found.get((kind, s)))
                      and d.oldest is not None]
            for status in bus_rows.LIVE:
                row = found.get((kind, status))
                messages.add_metric([kind, status], 0 if row is None else row.count)
            age.add_metric([kind], max(0.0, now - min(oldest)) if oldest else 0.0)
        fullest = families.GaugeMetricFamily(
            names.BUS_FULLEST_QUEUE, "Live messages and bytes of the fullest bus queue",
            labels=["measure"])
        fullest.add_metric(["messages"], count)
        fullest.add_metric(["bytes"], nbytes)
        yield from (messages, age, fullest)

    def _sessions(self, families: Any) -> Iterator[Any]:
        """``hypha_sessions_opened{window}``: sessions opened in the last hour and day."""
        assert self.store is not None
        now = time.time()
        try:
            counts = {w: self.store.opened_since(now - s) for w, s in SESSION_WINDOWS}
        except Exception as exc:
            log.warning("hypha metrics: sessions unavailable: %s", type(exc).__name__)
            return
        gauge = families.GaugeMetricFamily(
            names.SESSIONS_OPENED, "Sessions opened in the last hour / day", labels=["window"])
        for window, n in counts.items():
            gauge.add_metric([window], n)
        yield gauge

    def _mcp(self, families: Any) -> Iterator[Any]:
        """``hypha_mcp_tools_quarantined{server}``: the MCP tools of each server whose
        last discovered contract no operator accepted (the gateway's baselines: every
        server with one, 0 when none)."""
        assert self.store is not None
        try:
            counts = self.store.mcp_quarantined()
        except Exception as exc:
            log.warning("hypha metrics: mcp baselines unavailable: %s", type(exc).__name__)
            return
        gauge = families.GaugeMetricFamily(
            names.MCP_TOOLS_QUARANTINED, "MCP tools quarantined (not callable) by server",
            labels=["server"])
        for server, n in sorted(counts.items()):
            gauge.add_metric([server], n)
        yield gauge

    def _cases(self, families: Any) -> Iterator[Any]:
        """``hypha_recovery_cases{status}``: live runs (running, waiting for a person) by
        the status of their workflow's last recovery case; every status, 0 when none."""
        assert self.store is not None
        try:
            found = self.store.live_cases()
        except Exception as exc:
            log.warning("hypha metrics: recovery cases unavailable: %s", type(exc).__name__)
            return
        gauge = families.GaugeMetricFamily(
            names.RECOVERY_CASES, "Live runs by the status of their recovery case",
            labels=["status"])
        for status in CaseStatus:
            gauge.add_metric([status.value], found.get(status.value, 0))
        yield gauge
