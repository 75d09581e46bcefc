"""The model side of the loop: ``observe`` (ContextBuilt), ``reason`` (Reasoning) and
``select_action`` (ActionSelected)."""

from __future__ import annotations

from collections.abc import Mapping

from hypha_celery.graph import NodeContext
from hypha_celery.graph.model import NodeFn
from hypha_celery.jsontypes import JsonValue
from hypha_celery.react._actions import parse_action
from hypha_celery.react._llm import LLMProvider
from hypha_celery.react._provider import Provider
from hypha_celery.react._state import CatalogEntry, Observation, ReactState, ReasonRequest
from hypha_celery.tools import ToolRegistry, ToolSpec

__all__ = ["observe", "question_of", "reason_node", "select_action"]


def question_of(inp: JsonValue) -> JsonValue:
    """The run input's ``question`` (an input without one is the question itself)."""
    return inp["question"] if isinstance(inp, Mapping) and "question" in inp else inp


def observe(state: ReactState, inp: JsonValue) -> ReactState:
    """The loop's variables, from the run input."""
    return {"question": question_of(inp), "iteration": 0, "memory": [], "observation": None,
            "done": False}


def _catalog(specs: list[ToolSpec]) -> list[CatalogEntry]:
    return [{"id": s.id, "description": s.description, "side_effect": s.side_effect,
             "input_schema": s.input_schema} for s in specs]


def reason_node(provider: Provider, model: str, tools: ToolRegistry,
                max_iterations: int) -> NodeFn:
    """Ask the model for the next action: one recorded model call per iteration, with the
    question, the tools, the memory and the latest observation (recorded as a hash only,
    so it may hold prompt text). An :class:`LLMProvider` calls through ``ctx.llm``
    (usage, cost, rate limits); any other provider through ``ctx.model``."""
    catalog = _catalog(tools.specs())

    def reason(state: ReactState, inp: JsonValue, ctx: NodeContext) -> ReactState:
        iteration = int(state.get("iteration") or 0) + 1
        request: ReasonRequest = {"question": state.get("question"), "tools": catalog,
                   "memory": state.get("memory") or [], "observation": state.get("observation"),
                   "iteration": iteration, "max_iterations": max_iterations}
        if isinstance(provider, LLMProvider):
            return {"reply": provider.via(ctx, request), "iteration": iteration}
        return {"reply": ctx.model(model, provider, request), "iteration": iteration}
    return reason


def select_action(state: ReactState, inp: JsonValue) -> ReactState:
    """The reply as an action; a finish is its own observation."""
    action = parse_action(state.get("reply"))
    observation: Observation | None = None
    if action["action"] == "finish":
        observation = {"source": "model", "status": "finish", "output": action.get("output")}
    return {"action": action, "observation": observation}
