"""The ``end`` items of live streams (:mod:`hypha_celery.live`): a middleware, so they are
published where the runtime already tells that a run or a turn ended — after the commit
of a run's terminal event (``{"kind": "end", "status", "reason"}`` on ``run:<run_id>``),
and when an agent's turn attempt ended (``{"kind": "end", "ref", "attempt", "reason"}``
on ``agent:<name>``; ``reason`` is ``None`` for a turn that stopped normally)."""

from __future__ import annotations

from hypha_celery.live import LiveBus, agent_topic, end_item, run_topic
from hypha_celery.middleware import Middleware, RunEnd, Turn, TurnEnd

__all__ = ["LiveEnds"]


class LiveEnds(Middleware):
    """Publishes the end of a run's and of an agent turn's live stream."""

    def __init__(self, bus: LiveBus) -> None:
        self.bus = bus

    def after_run_end(self, run: RunEnd) -> None:
        self.bus.publish(run_topic(run.run_id), end_item(status=run.status, reason=run.reason))

    def after_turn(self, turn: Turn, end: TurnEnd) -> None:
        self.bus.publish(agent_topic(turn.agent),
                         end_item(ref=turn.ref, attempt=turn.attempt, reason=end.reason_kind))
