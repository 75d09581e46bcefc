"""``ctx.llm(..., context=LLMContext(...))``: build the call's context first.

What to put in (system instructions, a query over the run's user's memory, extra items
such as active skills) and the budgets; the runtime's builder
(:mod:`hypha_celery.runtime.llmcontext`, over :func:`hypha_celery.context.build_context`)
turns it and the call's messages into the messages sent, and records
``context.build.*`` / ``context.compacted`` (and the memory read) with the node's
outcome. docs/context.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hypha_celery.backends.llm.ref import ModelRef
from hypha_celery.backends.llm.types import Message
from hypha_celery.errors import ContextSpecError

if TYPE_CHECKING:
    from hypha_celery.graph.model import NodeContext

__all__ = ["ContextPort", "LLMContext"]


@dataclass(frozen=True, slots=True)
class LLMContext:
    """``system``: instructions (always kept); ``memory``: a recall query over the run's
    user's memory (``memory_limit`` records at most), rendered as data; ``items``:
    further :class:`~hypha_celery.context.ContextItem` s (active skills, documents);
    ``skills``: a :class:`~hypha_celery.skills.SkillRegistry` whose skills
    ``skill_request`` (a :class:`~hypha_celery.skills.SkillRequest`: attached, allowed,
    required ...; its ``text`` defaults to the call's last user message) selects and
    activates (``skill.*`` events; a required skill that fails raises
    ``RequiredSkillFailed`` before the call; a DomainPack gives both for a workflow
    state: ``pack.skill_registry``, ``pack.skill_request(workflow, state)``);
    ``total``: the token budget of the whole context (None: the builder's default);
    ``per_source``: caps by source name (``system``, ``skills``, ``memory``,
    ``conversation``, ``tools``). The call's own messages are the conversation (its
    system messages join ``system``; its last message is always kept)."""

    system: Sequence[str] = ()
    memory: str | None = None
    memory_limit: int = 10
    items: Sequence[Any] = ()
    skills: Any = None
    skill_request: Any = None
    total: int | None = None
    per_source: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.system, str):
            object.__setattr__(self, "system", (self.system,))
        if (self.skills is None) != (self.skill_request is None):
            raise ContextSpecError("LLMContext needs skills and skill_request together")
        if not isinstance(self.memory_limit, int) or self.memory_limit < 1:
            raise ContextSpecError(f"memory_limit must be an int >= 1, got "
                                   f"{self.memory_limit!r}")


#: The runtime's builder: the messages to send for a call of ``model`` with ``messages``.
ContextPort = Callable[["NodeContext", ModelRef, Sequence[Message], LLMContext], list[Message]]
