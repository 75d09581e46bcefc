"""The :class:`LiveBus` interface, its bounds, and how an item is shaped to fit them
(Redis pub/sub and in-process implementations live beside it)."""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from hypha_celery.events.jsontext import prebuilt
from hypha_celery.jsontypes import JsonObject, JsonValue, json_str

if TYPE_CHECKING:
    from hypha_celery.live._queue import Subscription

log = logging.getLogger("hypha_celery.live")

#: One live item: ``{"kind": "text" | "tool_use" | "usage" | "reasoning" | "gap" | "end",
#: ...}`` (JSON). Items a watcher gets are fresh dicts: it may keep or change them.
LiveItem: TypeAlias = JsonObject

#: A scalar field of an oversized non-text item is kept when its text is at most this long.
_KEPT_SCALAR = 200


@dataclass(frozen=True, slots=True)
class LiveBounds:
    """What one item, one watcher and one publishing process may hold.

    * ``max_item_bytes``: the largest item on the wire (UTF-8 JSON). A larger ``text``
      item is **split** into several text items (same other fields, the text cut on
      character boundaries, nothing lost); any other larger item is **truncated**: only
      its ``kind`` and its short scalar fields are kept, with ``"truncated": true`` and
      ``"bytes"`` (the size it had).
    * ``queue_items`` / ``queue_bytes``: what a watcher's queue holds. A watcher that reads
      slower than items arrive loses the newest ones and is told once, where they were
      missing, by ``{"kind": "gap", "lost": n}``. The ``end`` item is never dropped.
    * ``outbox_items`` / ``outbox_bytes``: items a process has published but not yet sent
      to Redis (the Redis bus sends from a background thread, so ``publish`` never waits
      on the network). Past it, items are dropped and the topic's next item is preceded by
      a ``gap`` item counting them.
    """

    max_item_bytes: int = 16 * 1024
    queue_items: int = 4096
    queue_bytes: int = 2 * 1024 * 1024
    outbox_items: int = 10_000
    outbox_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if min(self.max_item_bytes, self.queue_items, self.queue_bytes, self.outbox_items,
               self.outbox_bytes) <= 0 or self.max_item_bytes < 256:
            raise ValueError("live bounds must be positive (max_item_bytes >= 256)")


class LiveBus(ABC):
    """Token streams to whoever watches *now*. ``publish`` never raises and never blocks
    on a reader; items published before a watcher subscribed are not seen by it (nothing
    is stored). Topics are ``run:<run_id>`` and ``agent:<name>``."""

    @abstractmethod
    def publish(self, topic: str, item: LiveItem) -> None:
        """Fan ``item`` out to the topic's current subscribers; never raises (a failure
        is logged by its type only and the item is lost)."""

    @abstractmethod
    def subscribe(self, topic: str, *, timeout: float | None = None) -> Subscription:
        """Items published on ``topic`` from the moment this returns, until an ``end``
        item (yielded, then the iteration stops), ``close()``, or ``timeout`` seconds
        without an item. Use it as a context manager, or close it."""

    def flush(self, timeout: float = 1.0) -> bool:
        """Wait until what this process published so far has left it (the Redis bus
        sends from a thread); False after ``timeout`` seconds."""
        return True

    def close(self) -> None:
        """Release connections and threads (sends what is still queued, briefly)."""
        return None


class NullBus(LiveBus):
    """Publishes nowhere (no watcher can exist): a subscription waits for its timeout."""

    def publish(self, topic: str, item: LiveItem) -> None:
        return None

    def subscribe(self, topic: str, *, timeout: float | None = None) -> Subscription:
        from hypha_celery.live._queue import Subscription

        return Subscription(LiveBounds(queue_items=1, queue_bytes=1), timeout=timeout)


def run_topic(run_id: str) -> str:
    """The topic of a run's node model calls."""
    return f"run:{run_id}"


def agent_topic(name: str) -> str:
    """The topic of an agent's turns."""
    return f"agent:{name}"


def end_item(**fields: JsonValue) -> LiveItem:
    """The item that ends a topic's subscriptions (a run ended, a turn ended)."""
    return {"kind": "end", **fields}


def gap_item(lost: int | None) -> LiveItem:
    """``lost`` items went missing here (``None``: unknown, the connection dropped)."""
    return {"kind": "gap", "lost": lost}


_ENCODE = prebuilt(json.JSONEncoder(ensure_ascii=False, separators=(",", ":")))


def encode(item: LiveItem) -> bytes:
    """Compact JSON, UTF-8 (the C encoder built once: ``json.dumps`` with options builds
    an encoder per call)."""
    return _ENCODE(item).encode()


def is_end(payload: bytes) -> bool:
    """Whether an encoded item is an ``end`` item (without decoding it)."""
    return payload.startswith(b'{"kind":"end"')


def shape(item: LiveItem, max_bytes: int) -> list[bytes]:
    """``item`` encoded, as one payload or several (a split text), each at most
    ``max_bytes``; ``[]`` for an item that is not a JSON object with a ``kind`` (logged)."""
    try:
        if not isinstance(item, dict) or not isinstance(item.get("kind"), str):
            raise TypeError("a live item is a dict with a 'kind'")
        kind = item["kind"]
        payload = encode({"kind": kind, **item})  # "kind" first: is_end() reads the prefix
    except (TypeError, ValueError) as exc:
        log.warning("live item dropped: %s", type(exc).__name__)
        return []
    if len(payload) <= max_bytes:
        return [payload]
    if kind == "text" and isinstance(item.get("text"), str):
        split = _split_text(item, max_bytes)
        if split:
            return split
    return [_truncated(item, len(payload), max_bytes)]


def _split_text(item: LiveItem, max_bytes: int) -> list[bytes]:
    """Text items of at most ``max_bytes`` whose texts join to ``item["text"]``; ``[]``
    when the other fields alone leave too little room."""
    base = {"kind": "text", **{k: v for k, v in item.items() if k != "text"}}
    room = max_bytes - len(encode({**base, "text": ""}))
    if room < 64:
        return []
    text, out, at = json_str(item.get("text")), [], 0
    while at < len(text):
        n = room  # characters; each is 1 to 6 bytes of JSON
        while len(payload := encode({**base, "text": text[at:at + n]})) > max_bytes:
            n -= max(1, (len(payload) - max_bytes) // 6)
        out.append(payload)
        at += n
    return out


def _truncated(item: LiveItem, size: int, max_bytes: int) -> bytes:
    kept = {k: v for k, v in item.items()
            if v is None or isinstance(v, bool | int | float)
            or (isinstance(v, str) and len(v) <= _KEPT_SCALAR)}
    payload = encode({"kind": item["kind"], **kept, "truncated": True, "bytes": size})
    if len(payload) <= max_bytes:
        return payload
    return encode({"kind": item["kind"], "truncated": True, "bytes": size})
