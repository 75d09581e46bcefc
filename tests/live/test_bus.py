"""The bus contract, on both buses: order, only what comes after subscribing, the end item,
the bounds (gap items, split items), closing."""

from __future__ import annotations

import threading
import time

from hypha_celery.live import end_item
from tests.live.conftest import MakeBus
from tests.runtime.support import wait_until


def texts(n: int, prefix: str = "t") -> list[dict[str, object]]:
    return [{"kind": "text", "text": f"{prefix}{i}"} for i in range(n)]


def test_items_arrive_in_order_and_the_end_item_ends_the_subscription(make_bus: MakeBus) -> None:
    bus = make_bus()
    sub = bus.subscribe("run:r", timeout=5)
    sent = [*texts(50), {"kind": "usage", "input": 3, "output": 50}]
    for item in sent:
        bus.publish("run:r", item)
    bus.publish("run:r", end_item(status="completed", reason=None))
    assert list(sub) == [*sent, {"kind": "end", "status": "completed", "reason": None}]
    assert sub.closed and sub.get(0.01) is None


def test_a_late_watcher_gets_only_what_comes_after_it_subscribed(make_bus: MakeBus) -> None:
    bus = make_bus()
    early = bus.subscribe("run:r", timeout=5)
    for item in texts(3, "old"):
        bus.publish("run:r", item)
    assert bus.flush(5)
    wait_until(lambda: len(early) == 3)
    late = bus.subscribe("run:r", timeout=5)
    bus.publish("run:r", {"kind": "text", "text": "new"})
    bus.publish("run:r", end_item())
    assert [i.get("text") for i in late] == ["new", None]
    assert [i.get("text") for i in early] == ["old0", "old1", "old2", "new", None]


def test_topics_are_separate_and_watchers_of_one_topic_all_get_it(make_bus: MakeBus) -> None:
    bus = make_bus()
    a1, a2 = bus.subscribe("agent:a", timeout=5), bus.subscribe("agent:a", timeout=5)
    b = bus.subscribe("agent:b", timeout=5)
    bus.publish("agent:a", {"kind": "text", "text": "for a"})
    assert a2.get(5) == {"kind": "text", "text": "for a"}
    a2.close()  # the other watcher of the topic keeps it
    bus.publish("agent:a", end_item(ref="r1"))
    bus.publish("agent:b", end_item(ref="r2"))
    assert list(a1) == [{"kind": "text", "text": "for a"}, {"kind": "end", "ref": "r1"}]
    assert list(b) == [{"kind": "end", "ref": "r2"}]


def test_a_slow_watcher_loses_the_newest_items_and_is_told_once(make_bus: MakeBus) -> None:
    bus = make_bus(queue_items=10)
    sub = bus.subscribe("run:r", timeout=5)
    for item in texts(30):
        bus.publish("run:r", item)
    bus.publish("run:r", end_item())  # never dropped
    wait_until(lambda: len(sub) == 11)
    got = list(sub)
    assert got == [*texts(10), {"kind": "gap", "lost": 20}, {"kind": "end"}]


def test_the_queue_is_bounded_in_bytes_too(make_bus: MakeBus) -> None:
    bus = make_bus(queue_bytes=300)
    sub = bus.subscribe("run:r", timeout=5)
    for item in texts(4, "x" * 80):  # ~100 bytes each: two fit
        bus.publish("run:r", item)
    bus.publish("run:r", end_item())
    wait_until(lambda: len(sub) == 3)
    assert [i["kind"] for i in sub] == ["text", "text", "gap", "end"]
    bus.publish("run:r", {"kind": "text", "text": "after the end"})


def test_a_watcher_that_catches_up_gets_items_again_after_the_gap(make_bus: MakeBus) -> None:
    bus = make_bus(queue_items=2)
    sub = bus.subscribe("run:r", timeout=5)
    for item in texts(5):
        bus.publish("run:r", item)
    wait_until(lambda: len(sub) == 2)
    time.sleep(0.05)  # the rest was lost, not late
    assert [sub.get(1), sub.get(1), sub.get(1)] == [*texts(2), {"kind": "gap", "lost": 3}]
    bus.publish("run:r", {"kind": "text", "text": "again"})
    assert sub.get(5) == {"kind": "text", "text": "again"}
    sub.close()


def test_a_large_text_arrives_split_and_whole(make_bus: MakeBus) -> None:
    bus = make_bus(max_item_bytes=512)
    sub = bus.subscribe("run:r", timeout=5)
    text = "the quick brown fox " * 300
    bus.publish("run:r", {"kind": "text", "text": text})
    bus.publish("run:r", end_item())
    got = list(sub)
    assert len(got) > 10 and got[-1] == {"kind": "end"}
    assert "".join(str(i["text"]) for i in got[:-1]) == text


def test_a_quiet_subscription_ends_at_its_timeout_and_close_wakes_a_reader(
        make_bus: MakeBus) -> None:
    bus = make_bus()
    started = time.monotonic()
    assert list(bus.subscribe("run:quiet", timeout=0.1)) == []
    assert list(bus.subscribe("run:quiet").until_end(0.1)) == []
    assert time.monotonic() - started < 2
    sub = bus.subscribe("run:quiet")
    threading.Timer(0.05, sub.close).start()
    assert sub.get(5) is None and sub.closed
    bus.publish("run:quiet", {"kind": "text", "text": "nobody"})  # no watcher: fine
