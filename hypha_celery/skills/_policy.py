"""``SkillPolicy`` (hypha's ``DefaultSkillPolicy``): trust, tools, review."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypha_celery.skills._model import SideEffectPolicy, Skill, TrustLevel

__all__ = ["POLICY_ID", "SkillDecision", "SkillPolicy"]

POLICY_ID = "skill.default-policy"


@dataclass(frozen=True)
class SkillDecision:
    """``allowed`` (else ``reason``); the tools the skill may use (its
    ``allowed_tools`` intersected with those available; all available when it names
    none); ``requires_human_review`` when its ``side_effect_policy`` is ``human_review``."""

    allowed: bool
    allowed_tools: tuple[str, ...] = ()
    requires_human_review: bool = False
    reason: str | None = None
    policy_id: str = POLICY_ID


@dataclass(frozen=True)
class SkillPolicy:
    """Only skills whose trust is in ``allowed_trust`` (``trusted``, ``reviewed``) pass;
    every ``required_tools`` entry must be available; with ``require_available_tools``,
    every ``allowed_tools`` entry too."""

    allowed_trust: frozenset[TrustLevel] = frozenset({TrustLevel.TRUSTED, TrustLevel.REVIEWED})
    require_available_tools: bool = False

    def evaluate(self, skill: Skill, available_tools: Sequence[str]) -> SkillDecision:
        if skill.trust not in self.allowed_trust:
            return SkillDecision(False, reason=f"Skill {skill.id} trustLevel={skill.trust} "
                                               "is not allowed.")
        available = frozenset(available_tools)
        missing = [t for t in skill.required_tools if t not in available]
        if missing:
            return SkillDecision(False, reason=f"Skill {skill.id} requires unavailable tools: "
                                               f"{', '.join(missing)}.")
        outside = [t for t in skill.allowed_tools or () if t not in available]
        if self.require_available_tools and outside:
            return SkillDecision(False, reason=f"Skill {skill.id} declares tools outside the "
                                               f"current scope: {', '.join(outside)}.")
        tools = (tuple(dict.fromkeys(available_tools)) if skill.allowed_tools is None
                 else tuple(t for t in dict.fromkeys(skill.allowed_tools) if t in available))
        return SkillDecision(
            True, tools,
            requires_human_review=skill.side_effect_policy is SideEffectPolicy.HUMAN_REVIEW)
