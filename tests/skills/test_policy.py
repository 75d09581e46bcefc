"""``SkillPolicy``: trust, required and allowed tools, review."""

from __future__ import annotations

from hypha_celery.skills import (
    SideEffectPolicy,
    Skill,
    SkillDecision,
    SkillPolicy,
    TrustLevel,
)

POLICY = SkillPolicy()


def skill(**kw: object) -> Skill:
    return Skill(name="s", description="d", **kw)  # type: ignore[arg-type]


def test_trust_defaults_to_reviewed_and_passes() -> None:
    assert skill().trust is TrustLevel.REVIEWED
    assert POLICY.evaluate(skill(), ["t"]).allowed
    assert POLICY.evaluate(skill(trust=TrustLevel.TRUSTED), []).allowed


def test_untrusted_is_denied() -> None:
    decision = POLICY.evaluate(skill(trust=TrustLevel.UNTRUSTED), ["t"])
    assert decision == SkillDecision(False, reason="Skill s trustLevel=untrusted is not allowed.")


def test_the_trust_levels_are_configurable() -> None:
    policy = SkillPolicy(allowed_trust=frozenset(TrustLevel))
    assert policy.evaluate(skill(trust=TrustLevel.UNTRUSTED), []).allowed


def test_required_tools_must_be_available() -> None:
    decision = POLICY.evaluate(skill(required_tools=("a", "b", "c")), ["b"])
    assert not decision.allowed
    assert decision.reason == "Skill s requires unavailable tools: a, c."


def test_allowed_tools_are_intersected_with_the_available() -> None:
    decision = POLICY.evaluate(skill(allowed_tools=("b", "x", "a")), ["a", "b", "c"])
    assert decision.allowed_tools == ("b", "a")


def test_no_allowed_tools_means_every_available_tool() -> None:
    assert POLICY.evaluate(skill(), ["a", "b"]).allowed_tools == ("a", "b")
    assert POLICY.evaluate(skill(allowed_tools=()), ["a"]).allowed_tools == ()


def test_strict_policy_refuses_tools_outside_the_scope() -> None:
    decision = SkillPolicy(require_available_tools=True).evaluate(
        skill(allowed_tools=("a", "x")), ["a"])
    assert decision.reason == "Skill s declares tools outside the current scope: x."


def test_human_review_side_effects() -> None:
    assert POLICY.evaluate(skill(side_effect_policy=SideEffectPolicy.HUMAN_REVIEW),
                           []).requires_human_review
    assert not POLICY.evaluate(skill(side_effect_policy=SideEffectPolicy.WRITE),
                               []).requires_human_review
