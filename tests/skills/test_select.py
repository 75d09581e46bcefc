"""Selection: every activation mode, hypha's rejection order, sorting, scenario 21."""

from __future__ import annotations

import pytest

from hypha_celery.skills import (
    Activation,
    ActivationMode,
    RejectedSkill,
    Skill,
    SkillBinding,
    SkillRegistry,
    SkillRequest,
    regex_matches,
    regex_problem,
    select_skills,
)


def skill(skill_id: str, mode: ActivationMode = ActivationMode.ALWAYS, *patterns: str,
          **kw: object) -> Skill:
    return Skill(name=skill_id, description="d", instructions=f"{skill_id} text",
                 activation=Activation(mode, patterns), **kw)  # type: ignore[arg-type]


def ids(request: SkillRequest, *skills: Skill) -> list[str]:
    return [s.skill.id for s in select_skills(SkillRegistry(skills), request).selected]


def test_always() -> None:
    assert ids(SkillRequest(attached=["a"]), skill("a")) == ["a"]


@pytest.mark.parametrize(("text", "hit"), [("I want a REFUND now", True), ("refun", False),
                                           ("", False)])
def test_keyword_is_a_case_insensitive_substring(text: str, hit: bool) -> None:
    s = skill("k", ActivationMode.KEYWORD, "Refund", "money back")
    assert ids(SkillRequest(attached=["k"], text=text), s) == (["k"] if hit else [])


@pytest.mark.parametrize(("pattern", "text", "hit"), [
    (r"ord(er)?\s?#\d+", "about ORDER #123", True),
    (r"ord(er)?\s*#\d+", "about ORDER #123", False),  # two unbounded quantifiers: refused
    (r"^refund$", "REFUND", True),
    (r"^refund$", "a refund", False),
    ("[unclosed", "[unclosed", False),  # invalid: no match
    ("(a+)+$", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", False),  # unsafe: no match
    (r"(\w)\1", "aa", False),  # backreference: refused
    ("x" * 200, "x" * 200, False),  # over-long pattern: refused
    ("it's", "IT'S", True),  # a quote in the pattern
    (r"a\\b", "a\\b", True),  # an escaped backslash
])
def test_regex(pattern: str, text: str, hit: bool) -> None:
    assert regex_matches(pattern, text) is hit
    s = skill("r", ActivationMode.REGEX, pattern)
    assert ids(SkillRequest(attached=["r"], text=text), s) == (["r"] if hit else [])


def test_regex_problem_says_why_a_pattern_never_matches() -> None:
    assert regex_problem("refund") is None
    assert regex_problem("(a+)+") == ("unsafe pattern '(a+)+': nested quantifier (a quantified "
                                      "group that contains a quantifier)")
    assert "longer than 128" in (regex_problem("x" * 200) or "")


def test_regex_reads_a_bounded_prefix_of_the_input() -> None:
    assert regex_matches("needle", "needle" + "x" * 10_000)
    assert not regex_matches("needle", "x" * 10_000 + "needle")


def test_intent_is_an_exact_match() -> None:
    s = skill("i", ActivationMode.INTENT, "billing")
    assert ids(SkillRequest(attached=["i"], intent="billing"), s) == ["i"]
    assert ids(SkillRequest(attached=["i"], intent="Billing"), s) == []
    assert ids(SkillRequest(attached=["i"]), s) == []


def test_manual_needs_its_id() -> None:
    s = skill("m", ActivationMode.MANUAL)
    assert ids(SkillRequest(attached=["m"], manual=["m"]), s) == ["m"]
    assert ids(SkillRequest(attached=["m"], text="m"), s) == []


def test_sorted_by_priority_then_id() -> None:
    skills = [skill("b", priority=1), skill("a", priority=1), skill("z", priority=9),
              skill("c")]
    assert ids(SkillRequest(attached=["c", "b", "a", "z"]), *skills) == ["z", "a", "b", "c"]


def test_rejection_order_and_reasons() -> None:
    registry = SkillRegistry([
        skill("versioned", version="1.0"), skill("off", enabled=False),
        skill("outside"), skill("quiet", ActivationMode.KEYWORD, "never"),
        # each of these fails several checks: the first in hypha's order is reported
        skill("off-and-outside", enabled=False, version="2"),
    ])
    selection = select_skills(registry, SkillRequest(
        attached=["ghost", SkillBinding("versioned", "2.0"), "off", "outside", "quiet",
                  SkillBinding("off-and-outside", "3")],
        allowed=["versioned", "off", "quiet", "ghost"]))
    assert selection.selected == ()
    assert [(r.id, r.reason) for r in selection.rejected] == [
        ("ghost", "Skill is not registered."),
        ("versioned", "Skill version mismatch: requested 2.0, found 1.0."),
        ("off", "Skill is disabled."),
        ("outside", "Skill is not allowed by the current scope."),
        ("quiet", "Keyword did not match activation policy."),
        ("off-and-outside", "Skill version mismatch: requested 3, found 2."),
    ]


def test_a_pinned_version_that_matches() -> None:
    s = skill("v", version="1.0")
    assert ids(SkillRequest(attached=[SkillBinding("v", "1.0")]), s) == ["v"]


def test_allowed_none_means_every_attached_skill() -> None:
    assert ids(SkillRequest(attached=["a", "b"], allowed=None), skill("a"), skill("b")) == [
        "a", "b"]
    assert ids(SkillRequest(attached=["a", "b"], allowed=[]), skill("a"), skill("b")) == []


def test_a_required_skill_is_selected_without_activation() -> None:
    s = skill("req", ActivationMode.KEYWORD, "never")
    [chosen] = select_skills(SkillRegistry([s]), SkillRequest(
        attached=["req"], required=["req"])).selected
    assert (chosen.activation, chosen.required) == ("required", True)
    assert chosen.reason == "Skill is required by the current scope."


def test_a_required_skill_that_activates_says_its_mode() -> None:
    s = skill("req", ActivationMode.KEYWORD, "refund")
    [chosen] = select_skills(SkillRegistry([s]), SkillRequest(
        attached=["req"], required=["req"], text="refund")).selected
    assert (chosen.activation, chosen.required, chosen.matched) == ("keyword", True,
                                                                    ("refund",))


def test_scenario_21_a_required_skill_not_attached() -> None:
    registry = SkillRegistry([skill("skill.required"), skill("other")])
    selection = select_skills(registry, SkillRequest(attached=["other"],
                                                     required=["skill.required"]))
    assert [s.skill.id for s in selection.selected] == ["other"]
    assert selection.rejected == (RejectedSkill(
        "skill.required", "Required skill is not attached to the agent.", True),)
    assert selection.required_failures == selection.rejected


def test_a_required_skill_rejected_earlier_is_a_required_failure() -> None:
    selection = select_skills(SkillRegistry([skill("r", enabled=False)]), SkillRequest(
        attached=["r"], required=["r"]))
    assert selection.required_failures == (RejectedSkill("r", "Skill is disabled.", True),)


def test_an_attached_skill_counts_once() -> None:
    assert ids(SkillRequest(attached=["a", "a", SkillBinding("a")]), skill("a")) == ["a"]
