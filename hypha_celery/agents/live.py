"""An agent turn's live items on ``agent:<name>`` (:mod:`hypha_celery.live`): what a
``stream()`` watcher of the agent sees while a turn runs, never stored.

Each backend event becomes at most one item, with the turn's ``ref``: ``text`` ``{"text"}``,
``tool_use`` ``{"id", "name"}`` (not the input: it can hold what the user typed),
``reasoning`` ``{"chars"}``, ``usage`` (the counts). ``result`` / ``error`` are not items:
the turn's ``end`` item ``{"ref", "status", "reason"}`` follows the commit of its outcome.
"""

from __future__ import annotations

from hypha_celery.backends import BackendEvent
from hypha_celery.live import LiveBus, LiveItem, agent_topic, end_item

__all__ = ["publish_end", "publish_event"]

_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def item(event: BackendEvent, ref: str) -> LiveItem | None:
    """The live item of one backend event, or None (not shown live)."""
    kind, data = event.kind, event.data
    if kind == "text":
        return {"kind": "text", "text": data.get("text", ""), "ref": ref}
    if kind == "tool_use":
        return {"kind": "tool_use", "id": data.get("id"), "name": data.get("name"), "ref": ref}
    if kind == "reasoning":
        return {"kind": "reasoning", "chars": data.get("chars"), "ref": ref}
    if kind == "usage":
        counts = {k: data[k] for k in _COUNTS if isinstance(data.get(k), int)}
        return {"kind": "usage", **counts, "ref": ref}
    return None


def publish_event(bus: LiveBus, name: str, ref: str, event: BackendEvent) -> None:
    shown = item(event, ref)
    if shown is not None:
        bus.publish(agent_topic(name), shown)


def publish_end(bus: LiveBus, name: str, ref: str, status: str, reason: str | None) -> None:
    bus.publish(agent_topic(name), end_item(ref=ref, status=status, reason=reason))
