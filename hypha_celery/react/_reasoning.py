"""The model side of the loop: ``observe`` (ContextBuilt), ``reason`` (Reasoning) and
``select_action`` (ActionSelected)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from hypha_celery.events import payloads as ev
from hypha_celery.graph import NodeContext
from hypha_celery.graph.llmcall import thinking_events
from hypha_celery.graph.model import NodeFn
from hypha_celery.jsontypes import JsonValue
from hypha_celery.react._actions import Action, parse_action
from hypha_celery.react._context import ContextPlan, build_step
from hypha_celery.react._events import decided
from hypha_celery.react._llm import LLMProvider
from hypha_celery.react._provider import Provider, Reasoned, ReasoningProvider
from hypha_celery.react._state import CatalogEntry, Observation, ReactState, ReasonRequest
from hypha_celery.skills import complete_skills
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


def reason_node(provider: Provider, model: str, tools: ToolRegistry, max_iterations: int,
                plan: ContextPlan) -> NodeFn:
    """Ask the model for the next action: one recorded model call per iteration, after
    the step's context is built from ``plan`` (:func:`build_step`: skills, the user's
    memory, the question, the observations; its messages go in the request as
    ``messages``). The request (question, tools, memory, latest observation, messages) is
    recorded as a hash only, so it may hold prompt text. An :class:`LLMProvider` calls
    through ``ctx.llm`` (usage, cost, rate limits) with the built messages; any other
    provider through ``ctx.model``. Writes the step's reasoning events
    (:mod:`hypha_celery.react._events`)."""
    catalog = _catalog(tools.specs())
    options = len(catalog) + 1  # every tool, and finish

    def reason(state: ReactState, inp: JsonValue, ctx: NodeContext) -> ReactState:
        iteration = int(state.get("iteration") or 0) + 1
        built = build_step(ctx, plan, state, iteration)
        request: ReasonRequest = {"question": state.get("question"), "tools": catalog,
                   "memory": state.get("memory") or [], "observation": state.get("observation"),
                   "iteration": iteration, "max_iterations": max_iterations,
                   "messages": list(built.built.messages)}
        ctx.emit(ev.AgentDeliberationStarted(step=iteration, node=ctx.node_id, options=options))
        began = time.perf_counter()
        reply, spent = _infer(ctx, provider, model, request, iteration)
        ctx.emit(ev.InferenceCompleted(
            step=iteration, node=ctx.node_id, model=model, input_tokens=spent.input_tokens,
            output_tokens=spent.output_tokens,
            latency_ms=round((time.perf_counter() - began) * 1000.0, 3),
            context_hash=built.built.context_hash))
        complete_skills(built.active, iteration, ctx.emit, build_id=built.built.build_id)
        decided(ctx, iteration, options, parse_action(reply), reply)
        return {"reply": reply, "iteration": iteration}
    return reason


def _infer(ctx: NodeContext, provider: Provider, model: str, request: ReasonRequest,
           step: int) -> tuple[JsonValue, Reasoned]:
    """The model's reply and what it cost. ``ctx.llm`` writes its own ``thinking.*``; a
    :class:`ReasoningProvider`'s thinking is written here (a replay serves the reply and
    reports nothing)."""
    if isinstance(provider, LLMProvider):
        reply, result = provider.step(ctx, request, step)
        return reply, Reasoned(reply, input_tokens=result.usage.input_tokens,
                               output_tokens=result.usage.output_tokens)
    if not isinstance(provider, ReasoningProvider):
        return ctx.model(model, provider, request), Reasoned(None)
    seen: list[Reasoned] = []

    def call(req: object) -> object:
        seen.append(provider.reason(req))
        return seen[-1].output
    reply = ctx.model(model, call, request)
    spent = seen[0] if seen else Reasoned(reply)
    if spent.thinking_chars > 0:
        for payload in thinking_events(spent.thinking_chars, spent.thinking_tokens,
                                       step=step, node=ctx.node_id):
            ctx.emit(payload)
    return reply, spent


def select_action(state: ReactState, inp: JsonValue, ctx: NodeContext) -> ReactState:
    """The reply as an action (``agent.action.selected``); a finish is its own
    observation."""
    action: Action = parse_action(state.get("reply"))
    kind = action["action"]
    ctx.emit(ev.AgentActionSelected(step=int(state.get("iteration") or 0) or None,
                                    node=ctx.node_id, action=kind,
                                    tool=action.get("tool") if kind == "tool" else None))
    observation: Observation | None = None
    if kind == "finish":
        observation = {"source": "model", "status": "finish", "output": action.get("output")}
    return {"action": action, "observation": observation}
