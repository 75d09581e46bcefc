"""The bus's gauges: live messages by recipient kind and status, the oldest one's age, the
fullest queue (read from the store on scrape; every series present)."""

from __future__ import annotations

import time
from pathlib import Path

from celery import Celery
from prometheus_client import CollectorRegistry

from hypha_celery.bus import Bus, EndpointKind, Message, Scope, agent, human
from hypha_celery.metrics import HyphaCollector, names
from hypha_celery.store import EventStore
from hypha_celery.store import agents as agent_rows
from hypha_celery.store import bus as bus_rows


def note(to: object) -> Message:
    return Message.model_validate({"type": "t", "user_id": "u", "session_id": "s",
                                   "from": human("u"), "to": to, "payload": "x" * 10})


def test_the_bus_gauges(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'hypha.db'}")
    app = Celery("bus-gauges", broker="redis://127.0.0.1:1/0")  # no broker: no depth gauge
    try:
        store.migrate()
        agent_rows.create(store, "w", "i1", "chat", "idle", {}, None)
        bus = Bus(store, clock=lambda: time.time() - 30)
        for _ in range(3):
            bus.publish(note(human("bob")))
        bus.publish(note(agent("w")))
        assert bus.pull(human("bob"), Scope("u", "s")) is not None
        registry = CollectorRegistry()
        registry.register(HyphaCollector(app, lambda: [], store))

        def value(name: str, **labels: str) -> float | None:
            return registry.get_sample_value(name, labels)

        assert value(names.BUS_MESSAGES, recipient_kind="human", status="queued") == 2
        assert value(names.BUS_MESSAGES, recipient_kind="human", status="delivered") == 1
        assert value(names.BUS_MESSAGES, recipient_kind="agent", status="queued") == 1
        assert value(names.BUS_MESSAGES, recipient_kind="tool", status="queued") == 0
        age = value(names.BUS_OLDEST_AGE, recipient_kind="human")
        assert age is not None and 29 <= age <= 60
        assert value(names.BUS_OLDEST_AGE, recipient_kind="session") == 0
        assert value(names.BUS_FULLEST_QUEUE, measure="messages") == 3
        fullest = value(names.BUS_FULLEST_QUEUE, measure="bytes")
        assert fullest is not None and fullest > 3 * 10
    finally:
        store.dispose()
        app.close()


def test_the_label_set_is_the_endpoint_kinds() -> None:
    assert tuple(k.value for k in EndpointKind) == bus_rows.RECIPIENT_KINDS
