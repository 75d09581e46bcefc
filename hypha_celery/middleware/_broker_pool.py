"""The Redis broker's connection pools of a worker whose tasks run side by side in one
process (gevent's, eventlet's or the thread pool): as large as its concurrency.

kombu's Redis transport gives each channel a redis-py connection pool of
``max_connections`` (10 unless ``broker_transport_options`` says otherwise), which
raises ``MaxConnectionsError`` instead of waiting when every connection is in use. A
task acknowledged late acks from its own greenlet or thread, each ack taking one of the
consumer channel's connections for its round trip (task events, likewise, the event
channel's). When more than ten tasks end at once (the ``io`` profile's 1,000 greenlets,
a provider answering a burst of turns) an ack finds none: Celery logs ``Couldn't ack``
and the message stays unacknowledged, holding a prefetch slot until the worker stops and
delivered again once the visibility timeout passes (celery/celery#1350; measured in
``bench/agents_io.py``: 1 to 3 of 600 turns' acks a burst).

So, before the worker connects (``celeryd_after_setup``), :func:`fit` gives a worker of
a Hypha app on such a pool and a Redis broker ``max_connections`` = concurrency +
:data:`HEADROOM`, unless ``broker_transport_options`` sets it. The bound: a channel
opens connections only as tasks need them at once and keeps them; at most that many a
channel (the consumer's, the events', each pooled producer's, which one task uses at a
time), e.g. 1,010 Redis clients for the consumer of an ``io`` process at the peak of a
burst (Redis's own ``maxclients`` is 10,000 by default). The worker logs the number it
set (INFO, ``hypha_celery.middleware._broker_pool``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery.concurrency import ALIASES

__all__ = ["HEADROOM", "fit", "side_by_side"]

#: Connections beyond the concurrency: kombu's default pool size, for the channel's own
#: use besides the tasks' acks (restoring unacknowledged messages, the consumer's polls).
HEADROOM = 10
log = logging.getLogger(__name__)
_SIDE_BY_SIDE = frozenset(ALIASES[name] for name in ("gevent", "eventlet", "threads"))


def side_by_side(pool_cls: Any) -> bool:
    """Whether Celery's pool class ``pool_cls`` runs many tasks in the worker's own
    process (gevent, eventlet, threads), each acknowledging from its own greenlet or
    thread."""
    return f"{pool_cls.__module__}:{pool_cls.__name__}" in _SIDE_BY_SIDE


def fit(app: Any, pool_cls: Any, concurrency: int) -> int | None:
    """Set ``app``'s broker ``max_connections`` to ``concurrency`` + :data:`HEADROOM`
    when its worker runs ``concurrency`` tasks side by side (:func:`side_by_side`) on a
    Redis broker and the setting is not given; the number set, else None."""
    options = dict(app.conf.broker_transport_options or {})
    if "max_connections" in options or not side_by_side(pool_cls):
        return None
    connection = app.connection_for_read()  # not connected: its transport's type only
    try:
        if connection.transport.driver_type != "redis":
            return None
    finally:
        connection.release()
    size = options["max_connections"] = concurrency + HEADROOM
    app.conf.broker_transport_options = options
    log.info("Redis broker: up to %d connections a channel (%d tasks side by side)",
             size, concurrency)
    return size
