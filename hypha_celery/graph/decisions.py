"""What a decision policy returns: ``Next``, ``FanOut``, ``Finish``, ``Fail`` or ``Review``.

Each is a frozen slotted dataclass whose ``type`` (not an argument) names it; ``to_json``
is its JSON by :data:`DECISION` (a pydantic ``TypeAdapter``): ``type``, then the fields in
order. Nothing stores it (the coordinator records a decision's summary,
``decision.policy.recorded``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from hypha_celery.errors import GraphSpecError

#: Default bound on a ``FanOut``'s edges (``Graph(max_fanout=)``). Each edge is a task
#: message published at once and an item of the ``node.fanout.scheduled`` event; the
#: reducer gets every edge's outcome in one message. 256 leaves room for map-style
#: fan-outs (documents, shards, tools) while one decision stays a bounded burst: 256
#: messages, one event of 256 edges, 512 edge events, one reducer input of 256 outcomes
#: (a run of the default 25 steps at this width already holds about 13,000 events).
DEFAULT_MAX_FANOUT = 256


@dataclass(frozen=True, slots=True)
class Next:
    """Schedule one node with ``input``."""

    type: Literal["next"] = field(default="next", init=False, repr=False)
    node_id: str
    input: Any = None  # user data

    def to_json(self) -> dict[str, object]:
        return _json(self)


@dataclass(frozen=True, slots=True)
class FanOut:
    """Run ``edges`` in parallel (a Celery chord); ``reducer`` consolidates them. At most
    the graph's ``max_fanout`` edges (:data:`DEFAULT_MAX_FANOUT`): a wider one ends the
    run ``run.failed`` ``fanout_too_wide`` at the decision, before anything is scheduled."""

    type: Literal["fanout"] = field(default="fanout", init=False, repr=False)
    edges: list[Next] = field(default_factory=list)
    reducer: str = ""

    def __post_init__(self) -> None:
        if not self.edges:
            raise GraphSpecError("FanOut needs at least one edge")
        if not all(isinstance(e, Next) for e in self.edges):
            raise GraphSpecError("FanOut edges must be Next(...) objects")
        if not self.reducer:
            raise GraphSpecError("FanOut needs reducer=<name of a registered reducer>")

    def to_json(self) -> dict[str, object]:
        return _json(self)


@dataclass(frozen=True, slots=True)
class Finish:
    """End the run with ``result``."""

    type: Literal["finish"] = field(default="finish", init=False, repr=False)
    result: Any = None  # user data

    def to_json(self) -> dict[str, object]:
        return _json(self)


@dataclass(frozen=True, slots=True)
class Fail:
    """End the run ``run.failed`` with ``reason`` (a short code) and ``message``."""

    type: Literal["fail"] = field(default="fail", init=False, repr=False)
    message: str = ""
    reason: str = "workflow_failed"

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason:
            raise GraphSpecError("Fail needs a non-empty reason code")

    def to_json(self) -> dict[str, object]:
        return _json(self)


@dataclass(frozen=True, slots=True)
class Review:
    """Park the run for a human (``human.review.requested`` + ``run.waiting_human``): it
    holds no worker. An approval, rejection or expiry records its event and calls the
    policy again, which reads the outcome in ``ctx.reviews[review_id]``.

    ``subject`` (JSON) says what is reviewed — shown to the reviewer, so keep secrets and
    prompt text out of it; ``expires_in`` (seconds) lets the supervisor expire it."""

    type: Literal["review"] = field(default="review", init=False, repr=False)
    reason: str
    subject: Any = None  # user data: not in its JSON
    expires_in: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason:
            raise GraphSpecError("Review needs a reason")
        if self.expires_in is not None and not self.expires_in > 0:
            raise GraphSpecError("Review expires_in must be > 0 seconds")

    def to_json(self) -> dict[str, object]:
        """``type``, ``reason``, ``expires_in`` (not the subject)."""
        return _json(self)


Decision = Next | FanOut | Finish | Fail | Review

#: Writes a decision's JSON (``type`` first); a review's subject stays out of it.
DECISION: TypeAdapter[Decision] = TypeAdapter(Decision)


def _json(decision: Decision) -> dict[str, object]:
    json: dict[str, object] = DECISION.dump_python(decision, exclude={"subject"})
    return json
