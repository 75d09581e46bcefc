"""The closing side of the loop: ``observe_result`` (ObservationRecorded), ``verify``
(Verifying) and ``memory_sync`` (MemorySync)."""

from __future__ import annotations

from typing import Literal

from hypha_celery.events import payloads as ev
from hypha_celery.graph import NodeContext
from hypha_celery.graph.model import NodeFn
from hypha_celery.jsontypes import JsonValue
from hypha_celery.react._actions import Action
from hypha_celery.react._state import MemoryEntry, Observation, ReactState
from hypha_celery.react._verifiers import Verifier, answer_of
from hypha_celery.tools._node import ToolSummary

__all__ = ["memory_sync_node", "observe_result", "verify_node"]


def observe_result(state: ReactState, inp: JsonValue, ctx: NodeContext) -> ReactState:
    """The tool result, or the approval of the person the model asked for, as the
    observation."""
    action: Action = state.get("action") or {}
    if action.get("action") == "human_review":
        review = ctx.review
        return {"observation": {"source": "human", "status": "approved",
                                "by": None if review is None else review.get("by"),
                                "review_id": None if review is None else review["review_id"],
                                "reason": action.get("reason")}}
    result: ToolSummary | dict[str, None] = state.get("tool_result") or {}
    return {"observation": {"source": "tool", "tool": result.get("tool"),
                            "status": result.get("status"), "output": result.get("output"),
                            "code": result.get("code"), "message": result.get("message")}}


def verify_node(verifier: Verifier, max_iterations: int) -> NodeFn:
    """Done when ``verifier`` accepts the observation (``stop``: ``finish`` for the
    model's, ``verified`` for another), or when ``max_iterations`` model calls were made
    (``stop``: ``max_iterations``: a finish with the last observation). Done sets
    ``variables.result = {"answer", "iterations"}``, the run's result. Ends the
    iteration: ``react.step.completed`` (``phase`` ``complete`` or ``reason``)."""
    def verify(state: ReactState, inp: JsonValue, ctx: NodeContext) -> ReactState:
        update = _verdict(verifier, max_iterations, state)
        action: Action = state.get("action") or {}
        ctx.emit(ev.ReactStepCompleted(step=int(state.get("iteration") or 0) or None,
                                       node=ctx.node_id,
                                       phase="complete" if update["done"] else "reason",
                                       action=action.get("action")))
        return update
    return verify


def _verdict(verifier: Verifier, max_iterations: int, state: ReactState) -> ReactState:
    observation: Observation = state.get("observation") or {}
    iteration = int(state.get("iteration") or 0)
    stop: Literal["finish", "verified", "max_iterations"]
    if verifier(observation):
        stop = "finish" if observation.get("source") == "model" else "verified"
    elif iteration >= max_iterations:
        stop = "max_iterations"
    else:
        return {"done": False}
    return {"done": True, "stop": stop,
            "result": {"answer": answer_of(observation), "iterations": iteration}}


def memory_sync_node(limit: int) -> NodeFn:
    """Append the observation (with its iteration) to ``variables.memory``, keeping the
    last ``limit`` entries."""
    def memory_sync(state: ReactState, inp: JsonValue) -> ReactState:
        entry: MemoryEntry = {"iteration": state.get("iteration"),
                              **(state.get("observation") or {})}
        return {"memory": [*(state.get("memory") or []), entry][-limit:]}
    return memory_sync
