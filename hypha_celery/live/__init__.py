"""Live token streams: what a running node or agent turn emits (text deltas, tool-use
notices, usage), fanned out to whoever watches *now* (``run.stream()``, the agents'
``stream``, ``hypha events RUN --follow``) and never stored token by token.

Topics are ``run:<run_id>`` and ``agent:<name>``. :class:`LiveBus` is the interface;
``publish`` never raises and never blocks on a slow reader (a reader that falls behind
loses items, and is told so by a ``{"kind": "gap"}`` item)."""

from hypha_celery.live.bus import LiveBus, LiveItem, NullBus

__all__ = ["LiveBus", "LiveItem", "NullBus"]
