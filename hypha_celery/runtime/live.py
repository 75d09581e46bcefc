"""The ``end`` item of a run's live stream (:mod:`hypha_celery.live`): a middleware, so it
is published where the runtime already tells that a run ended — after the commit of its
terminal event, ``{"kind": "end", "status", "reason"}`` on ``run:<run_id>``. (An agent's
turn ends its stream itself: the agents' relay publishes the turn's ``end`` item when the
outcome is known, with what only it knows.) A run that failed to enqueue gets no ``end``
item: its id never reached the caller, so nobody can be watching, and the bus usually
shares the broker that was just found down."""

from __future__ import annotations

from hypha_celery.errors import FailureReason
from hypha_celery.live import LiveBus, end_item, run_topic
from hypha_celery.middleware import Middleware, RunEnd

__all__ = ["LiveEnds"]


class LiveEnds(Middleware):
    """Publishes the end of a run's live stream."""

    def __init__(self, bus: LiveBus) -> None:
        self.bus = bus

    def after_run_end(self, run: RunEnd) -> None:
        if run.reason == FailureReason.ENQUEUE_FAILED.value:
            return
        self.bus.publish(run_topic(run.run_id), end_item(status=run.status, reason=run.reason))
