"""What a decision policy returns: ``Next``, ``FanOut`` or ``Finish``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypha_celery.errors import GraphSpecError


@dataclass(frozen=True, slots=True)
class Next:
    """Schedule one node with ``input``."""

    node_id: str
    input: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"type": "next", "node_id": self.node_id, "input": self.input}


@dataclass(frozen=True, slots=True)
class FanOut:
    """Run ``edges`` in parallel (a Celery chord); ``reducer`` consolidates them."""

    edges: list[Next] = field(default_factory=list)
    reducer: str = ""

    def __post_init__(self) -> None:
        if not self.edges:
            raise GraphSpecError("FanOut needs at least one edge")
        if not all(isinstance(e, Next) for e in self.edges):
            raise GraphSpecError("FanOut edges must be Next(...) objects")
        if not self.reducer:
            raise GraphSpecError("FanOut needs reducer=<name of a registered reducer>")

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "fanout",
            "reducer": self.reducer,
            "edges": [e.to_json() for e in self.edges],
        }


@dataclass(frozen=True, slots=True)
class Finish:
    """End the run with ``result``."""

    result: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"type": "finish", "result": self.result}


Decision = Next | FanOut | Finish
