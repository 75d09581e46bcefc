"""Active skills as context items (what ReAct, ``ctx.llm(context=)`` and agent turns
put in the ``skills`` source)."""

from __future__ import annotations

from collections.abc import Iterable

from hypha_celery.context._items import ContextItem, ContextSource
from hypha_celery.skills import ActiveSkill

__all__ = ["skill_items"]


def skill_items(active: Iterable[ActiveSkill]) -> list[ContextItem]:
    """One ``skills`` item per active skill: its id, its text, its version as the
    revision, its priority; a required skill's item is required (never dropped)."""
    return [ContextItem(ContextSource.SKILLS, one.id, one.text, revision=one.version,
                        priority=one.priority, required=one.required) for one in active]
