"""The runtime's context builder for ``ctx.llm(..., context=LLMContext(...))``: the
call's messages, the instructions, the run's user's memory (a recorded ``ctx.recall``)
and any further items, through :func:`~hypha_celery.context.build_context` with the
tokenizer of the call's model; its events go with the node's outcome (``ctx.emit``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import cast

from hypha_celery.backends.llm.ref import ModelRef
from hypha_celery.backends.llm.types import Message
from hypha_celery.context import (
    DEFAULT_TOTAL,
    ContextBudget,
    ContextItem,
    ContextSource,
    build_context,
    tokenizer_for,
)
from hypha_celery.errors import ContextSpecError
from hypha_celery.graph.llmcontext import LLMContext
from hypha_celery.graph.model import NodeContext

__all__ = ["build_for_llm", "conversation_items"]


def build_for_llm(ctx: NodeContext, model: ModelRef, messages: Sequence[Message],
                  request: LLMContext) -> list[Message]:
    """The messages to send (see the module doc)."""
    items: list[ContextItem] = [
        ContextItem(ContextSource.SYSTEM, f"system.{i}", text, required=True, order=i)
        for i, text in enumerate(request.system)]
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
                          build_id=f"{ctx._recorder().next_id('model')}.context",
                          purpose="llm", emit=ctx.emit, node=ctx.node_id)
    return list(built.messages)


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
