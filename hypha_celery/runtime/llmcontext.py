"""The runtime's context builder for ``ctx.llm(..., context=LLMContext(...))``: the
call's messages, the instructions, the run's user's memory (a recorded ``ctx.recall``)
and any further items, through :func:`~hypha_celery.context.build_context` with the
tokenizer of the call's model; its events go with the node's outcome (``ctx.emit``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import cast

from hypha_celery.backends.llm.ref import ModelRef
from hypha_celery.backends.llm.types import Message
from hypha_celery.context import (
    DEFAULT_TOTAL,
    ContextBudget,
    ContextItem,
    ContextSource,
    build_context,
    skill_items,
    tokenizer_for,
)
from hypha_celery.errors import ContextSpecError
from hypha_celery.graph.llmcontext import LLMContext
from hypha_celery.graph.model import NodeContext
from hypha_celery.skills import (
    SkillRegistry,
    SkillRequest,
    activate_skills,
    complete_skills,
    select_skills,
)

__all__ = ["build_for_llm", "conversation_items"]


def build_for_llm(ctx: NodeContext, model: ModelRef, messages: Sequence[Message],
                  request: LLMContext) -> list[Message]:
    """The messages to send (see the module doc)."""
    build_id = f"{ctx._recorder().next_id('model')}.context"
    items: list[ContextItem] = [
        ContextItem(ContextSource.SYSTEM, f"system.{i}", text, required=True, order=i)
        for i, text in enumerate(request.system)]
    if request.skills is not None:
        items.extend(_active_skills(ctx, request, messages, build_id))
    if request.memory:
        items.extend(ContextItem(ContextSource.MEMORY, hit.id, hit.text,
                                 revision=hit.revision, priority=hit.score)
                     for hit in ctx.recall(request.memory, limit=request.memory_limit))
    items.extend(conversation_items(messages))
    for item in request.items:
        if not isinstance(item, ContextItem):
            raise ContextSpecError(f"LLMContext.items holds ContextItems, not "
                                   f"{type(item).__name__}")
        items.append(item)
    # ContextBudget reads source names as well (a wrong one: ContextSpecError)
    caps = cast(Mapping[ContextSource, int], dict(request.per_source))
    budget = ContextBudget(request.total or DEFAULT_TOTAL, caps)
    built = build_context(items, budget=budget, tokenizer=tokenizer_for(str(model)),
                          build_id=build_id, purpose="llm", emit=ctx.emit, node=ctx.node_id)
    return list(built.messages)


def _active_skills(ctx: NodeContext, request: LLMContext, messages: Sequence[Message],
                 build_id: str) -> list[ContextItem]:
    """Select and activate the request's skills (``skill.*`` with the node's outcome;
    ``skill.completed`` for each: it goes into this call); a required one that fails
    raises ``RequiredSkillFailed`` before the call."""
    if not isinstance(request.skills, SkillRegistry) or \
            not isinstance(request.skill_request, SkillRequest):
        raise ContextSpecError("LLMContext.skills is a SkillRegistry and skill_request a "
                               "SkillRequest")
    wanted = request.skill_request
    if not wanted.text:
        last = next((m.get("content") or "" for m in reversed(messages)
                     if m["role"] == "user"), "")
        wanted = replace(wanted, text=last)
    active = activate_skills(select_skills(request.skills, wanted), emit=ctx.emit,
                             build_id=build_id)
    complete_skills(active, None, ctx.emit, build_id=build_id)
    return skill_items(active)


def conversation_items(messages: Sequence[Message]) -> Iterator[ContextItem]:
    """A call's messages as items: system messages are (kept) instructions, the others
    the conversation in their order, the last one kept."""
    last = len(messages) - 1
    for i, m in enumerate(messages):
        text = m.get("content") or ""
        if m["role"] == "system":
            yield ContextItem(ContextSource.SYSTEM, f"message.{i}", text, required=True,
                              order=i)
            continue
        yield ContextItem(ContextSource.CONVERSATION, f"message.{i}", text, role=m["role"],
                          order=i, required=i == last, call_id=m.get("tool_call_id"),
                          tool_calls=tuple(m.get("tool_calls") or ()))
