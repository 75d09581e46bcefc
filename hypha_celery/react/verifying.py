"""The closing side of the loop: ``observe_result`` (ObservationRecorded), ``verify``
(Verifying) and ``memory_sync`` (MemorySync)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypha_celery.graph import NodeContext
from hypha_celery.graph.model import NodeFn
from hypha_celery.react.verifiers import Verifier, answer_of

__all__ = ["memory_sync_node", "observe_result", "verify_node"]

State = Mapping[str, Any]


def observe_result(state: State, inp: Any, ctx: NodeContext) -> dict[str, Any]:
    """The tool result, or the approval of the person the model asked for, as the
    observation."""
    action = state.get("action") or {}
    if action.get("action") == "human_review":
        review = ctx.review or {}
        return {"observation": {"source": "human", "status": "approved",
                                "by": review.get("by"), "review_id": review.get("review_id"),
                                "reason": action.get("reason")}}
    result = state.get("tool_result") or {}
    return {"observation": {"source": "tool", "tool": result.get("tool"),
                            "status": result.get("status"), "output": result.get("output"),
                            "code": result.get("code"), "message": result.get("message")}}


def verify_node(verifier: Verifier, max_iterations: int) -> NodeFn:
    """Done when ``verifier`` accepts the observation (``stop``: ``finish`` for the
    model's, ``verified`` for another), or when ``max_iterations`` model calls were made
    (``stop``: ``max_iterations``: a finish with the last observation). Done sets
    ``variables.result = {"answer", "iterations"}``, the run's result."""
    def verify(state: State, inp: Any) -> dict[str, Any]:
        observation = state.get("observation") or {}
        iteration = int(state.get("iteration") or 0)
        if verifier(observation):
            stop = "finish" if observation.get("source") == "model" else "verified"
        elif iteration >= max_iterations:
            stop = "max_iterations"
        else:
            return {"done": False}
        return {"done": True, "stop": stop,
                "result": {"answer": answer_of(observation), "iterations": iteration}}
    return verify


def memory_sync_node(limit: int) -> NodeFn:
    """Append the observation (with its iteration) to ``variables.memory``, keeping the
    last ``limit`` entries."""
    def memory_sync(state: State, inp: Any) -> dict[str, Any]:
        entry = {"iteration": state.get("iteration"), **(state.get("observation") or {})}
        return {"memory": [*(state.get("memory") or []), entry][-limit:]}
    return memory_sync
