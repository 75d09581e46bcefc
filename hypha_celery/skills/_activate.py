"""Activating selected skills for one model call: policy, bounded text, events.

For each selected skill: ``skill.selected``; the policy's decision; its instructions and
``on_activation`` references cut to the character budget; ``skill.loaded`` (hash, counts,
never content) -- or ``skill.failed`` with the reason. A required skill that was rejected
by the selection, denied by the policy or failed to load makes :func:`activate_skills`
raise :class:`~hypha_celery.errors.RequiredSkillFailed` once every event is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hypha_celery.errors import RequiredSkillFailed
from hypha_celery.events.payloads import (
    Payload,
    SkillCompleted,
    SkillFailed,
    SkillLoaded,
    SkillSelected,
)
from hypha_celery.skills._limits import SkillLimits
from hypha_celery.skills._model import Skill
from hypha_celery.skills._policy import SkillPolicy
from hypha_celery.skills._select import SelectedSkill, SkillSelection

__all__ = ["TRUNCATION_MARK", "ActiveSkill", "Emit", "SkillProvenance", "TokenCounter",
           "activate_skills", "complete_skills", "skill_text"]

#: The caller's event sink: one typed payload per call (the runtime picks the log).
Emit = Callable[[Payload], None]
#: Tokens of a text (a provider's tokenizer); without one, ``chars // 4``.
TokenCounter = Callable[[str], int]
#: Ends a text cut to its budget.
TRUNCATION_MARK = "\n...[truncated]"

_DEFAULT_POLICY = SkillPolicy()
_DEFAULT_LIMITS = SkillLimits()


@dataclass(frozen=True)
class SkillProvenance:
    """Where a context item came from: ``source`` ``skills``, the skill id, its version
    as the revision."""

    id: str
    revision: str | None
    source: str = "skills"


@dataclass(frozen=True)
class ActiveSkill:
    """A skill that goes into the model call: ``text`` (instructions then the
    ``on_activation`` references, within the budget), the tools it may use, whether
    its side effects need review, and its hash and counts."""

    skill: Skill
    text: str
    allowed_tools: tuple[str, ...]
    requires_human_review: bool
    activation: str
    required: bool
    chars: int
    tokens: int
    assets: int
    truncated: bool

    @property
    def id(self) -> str:
        return self.skill.id

    @property
    def version(self) -> str | None:
        return self.skill.version

    @property
    def content_hash(self) -> str:
        return self.skill.content_hash

    @property
    def priority(self) -> int:
        return self.skill.priority

    @property
    def provenance(self) -> SkillProvenance:
        return SkillProvenance(self.skill.id, self.skill.version)


def skill_text(skill: Skill, max_chars: int) -> tuple[str, int, bool]:
    """``skill``'s context text cut to ``max_chars``: the instructions, then each
    reference under a ``## path`` heading; how many references it reaches; whether it
    was cut (then it ends with :data:`TRUNCATION_MARK`, inside the budget)."""
    parts = [skill.instructions.strip()]
    starts = []
    for ref in skill.references:
        starts.append(sum(len(p) for p in parts) + 2 * (len(parts) - 1) + 2)
        parts.append(f"## {ref.path}\n\n{ref.text.strip()}")
    full = "\n\n".join(p for p in parts)
    if len(full) <= max_chars:
        return full, len(skill.references), False
    keep = max_chars - len(TRUNCATION_MARK)
    cut = full[:keep] + TRUNCATION_MARK if keep > 0 else full[:max_chars]
    reached = sum(1 for start in starts if start < max(keep, 0))
    return cut, reached, True


def activate_skills(selection: SkillSelection, *, policy: SkillPolicy = _DEFAULT_POLICY,
                    limits: SkillLimits = _DEFAULT_LIMITS, emit: Emit | None = None,
                    build_id: str | None = None, max_chars: int | None = None,
                    token_counter: TokenCounter | None = None) -> list[ActiveSkill]:
    """The active skills of ``selection``, in its order (priority, then id). The text
    budget of a skill is ``max_chars``, else its ``context_budget``, else
    ``limits.max_chars``. Raises :class:`RequiredSkillFailed` (after writing every event)
    when a required skill is rejected, denied or fails to load."""
    send = emit or _discard
    failures: list[tuple[str, str]] = []
    for rejected in selection.required_failures:
        send(SkillFailed(skill_id=rejected.id, version=rejected.version, build_id=build_id,
                         required=True, reason=rejected.reason))
        failures.append((rejected.id, rejected.reason))
    active: list[ActiveSkill] = []
    for chosen in selection.selected:
        skill = chosen.skill
        send(SkillSelected(skill_id=skill.id, version=skill.version, build_id=build_id,
                           activation=chosen.activation, required=chosen.required,
                           priority=skill.priority))
        one, reason = _activate(chosen, selection, policy, limits, max_chars, token_counter)
        if one is None:
            send(SkillFailed(skill_id=skill.id, version=skill.version, build_id=build_id,
                             required=chosen.required, reason=reason))
            if chosen.required:
                failures.append((skill.id, reason))
            continue
        send(SkillLoaded(skill_id=skill.id, version=skill.version, build_id=build_id,
                         content_hash=skill.content_hash, chars=one.chars, tokens=one.tokens,
                         assets=one.assets, truncated=one.truncated))
        active.append(one)
    if failures:
        raise RequiredSkillFailed(failures)
    return active


def complete_skills(active: Sequence[ActiveSkill], step: int | None, emit: Emit | None, *,
                    build_id: str | None = None) -> None:
    """``skill.completed`` for each skill that went into the model call of ``step``."""
    if emit is None:
        return
    for one in active:
        emit(SkillCompleted(skill_id=one.id, version=one.version, build_id=build_id,
                            step=step))


def _activate(chosen: SelectedSkill, selection: SkillSelection, policy: SkillPolicy,
              limits: SkillLimits, max_chars: int | None, count: TokenCounter | None
              ) -> tuple[ActiveSkill | None, str]:
    skill = chosen.skill
    decision = policy.evaluate(skill, selection.available_tools)
    if not decision.allowed:
        return None, decision.reason or "Skill denied by policy."
    if len(skill.references) > limits.max_activation_assets:
        return None, (f"Skill {skill.id} exceeds the {limits.max_activation_assets} "
                      "activation asset limit.")
    budget = max(1, max_chars or skill.context_budget or limits.max_chars)
    text, assets, truncated = skill_text(skill, budget)
    tokens = count(text) if count is not None else len(text) // 4
    return ActiveSkill(
        skill=skill, text=text, allowed_tools=decision.allowed_tools,
        requires_human_review=decision.requires_human_review, activation=chosen.activation,
        required=chosen.required, chars=len(text), tokens=tokens, assets=assets,
        truncated=truncated), ""


def _discard(_payload: Payload) -> None:
    return None
