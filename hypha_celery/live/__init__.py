"""Live token streams: what a running node or agent turn emits (text deltas, tool-use
notices, usage), fanned out to whoever watches *now* (``run.stream()``, the agents'
``stream``, ``hypha events RUN --follow``) and never stored token by token.

Topics are ``run:<run_id>`` and ``agent:<name>``. :class:`LiveBus` is the interface:
:class:`RedisLiveBus` (pub/sub, across machines) and :class:`MemoryLiveBus` (in-process,
the embedded default) implement it, within explicit :class:`LiveBounds`. ``publish``
never raises and never blocks on a slow reader (a reader that falls behind loses items,
and is told so by a ``{"kind": "gap"}`` item); an ``{"kind": "end"}`` item ends the
topic's subscriptions (published when a run ends, by
:class:`~hypha_celery.runtime.live.LiveEnds`, and when a turn ends, by the agents' relay).

Items producers publish (JSON objects, ``kind`` first on the wire): ``text`` ``{"text"}``
(a delta), ``tool_use`` ``{"id", "name"}``, ``usage`` (the usage JSON), ``reasoning``
``{"chars"}`` (never the reasoning text), each with the ids that place it (a node call:
``execution_id``, ``call_id``; a turn: ``ref``). Watchers also get ``gap`` ``{"lost"}`` and
``end``. Use :func:`run_topic` / :func:`agent_topic` for the topic names."""

from hypha_celery.live._bus import (
    LiveBounds,
    LiveBus,
    LiveItem,
    NullBus,
    agent_topic,
    end_item,
    gap_item,
    run_topic,
)
from hypha_celery.live._memory import MemoryLiveBus
from hypha_celery.live._queue import LiveStream, Subscription
from hypha_celery.live._redis import RedisLiveBus

__all__ = [
    # the interface and its items
    "LiveBounds",
    "LiveBus",
    "LiveItem",
    "NullBus",
    "agent_topic",
    "end_item",
    "gap_item",
    "run_topic",
    # the buses
    "MemoryLiveBus",
    "RedisLiveBus",
    # watching
    "LiveStream",
    "Subscription",
]
