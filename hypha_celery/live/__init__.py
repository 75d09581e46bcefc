"""Live token streams: what a running node or agent turn emits (text deltas, tool-use
notices, usage), fanned out to whoever watches *now* (``run.stream()``, the agents'
``stream``, ``hypha events RUN --follow``) and never stored token by token.

Topics are ``run:<run_id>`` and ``agent:<name>``. :class:`LiveBus` is the interface:
:class:`RedisLiveBus` (pub/sub, across machines) and :class:`MemoryLiveBus` (in-process,
the embedded default) implement it, within explicit :class:`LiveBounds`. ``publish``
never raises and never blocks on a slow reader (a reader that falls behind loses items,
and is told so by a ``{"kind": "gap"}`` item); an ``{"kind": "end"}`` item ends the
topic's subscriptions (the runtime publishes it when a run or a turn ends)."""

from hypha_celery.live.bus import (
    LiveBounds,
    LiveBus,
    LiveItem,
    NullBus,
    agent_topic,
    end_item,
    gap_item,
    run_topic,
)
from hypha_celery.live.memory import MemoryLiveBus
from hypha_celery.live.queue import Subscription
from hypha_celery.live.redis import RedisLiveBus

__all__ = ["LiveBounds", "LiveBus", "LiveItem", "MemoryLiveBus", "NullBus", "RedisLiveBus",
           "Subscription", "agent_topic", "end_item", "gap_item", "run_topic"]
