"""Activation: the text within its budget, the events (counts and hashes, never
content), and required failures raising before any inference."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypha_celery.errors import RequiredSkillFailed
from hypha_celery.events.payloads import (
    Payload,
    SkillCompleted,
    SkillFailed,
    SkillLoaded,
    SkillSelected,
)
from hypha_celery.skills import (
    TRUNCATION_MARK,
    Activation,
    ActivationMode,
    SideEffectPolicy,
    Skill,
    SkillLimits,
    SkillProvenance,
    SkillReference,
    SkillRegistry,
    SkillRequest,
    TrustLevel,
    activate_skills,
    complete_skills,
    load_skill,
    select_skills,
    skill_text,
)
from tests.skills.helpers import HYPHA, write_skill


def skill(skill_id: str, **kw: object) -> Skill:
    return Skill(name=skill_id, description="d", instructions=f"{skill_id} instructions",
                 **kw)  # type: ignore[arg-type]


def run(request: SkillRequest, *skills: Skill, **kw: object
        ) -> tuple[list[Payload], list[object]]:
    events: list[Payload] = []
    selection = select_skills(SkillRegistry(skills), request)
    active = activate_skills(selection, emit=events.append, **kw)  # type: ignore[arg-type]
    return events, list(active)


def test_an_active_skill_and_its_events() -> None:
    hypha = load_skill(HYPHA)
    events: list[Payload] = []
    selection = select_skills(SkillRegistry([hypha]), SkillRequest(
        attached=["skill.refunds"], text="refund please",
        available_tools=["lookup_order", "send_mail"]))
    [active] = activate_skills(selection, emit=events.append, build_id="b1")
    assert active.id == "skill.refunds" and active.version == "1.2.0"
    assert active.text.startswith("Decide refunds by the policy below.")
    assert "## policy.md\n\nOrders younger than 30 days" in active.text
    assert active.allowed_tools == ("lookup_order",)
    assert active.requires_human_review
    assert active.provenance == SkillProvenance("skill.refunds", "1.2.0", "skills")
    assert active.content_hash == hypha.content_hash
    assert events == [
        SkillSelected(skill_id="skill.refunds", version="1.2.0", build_id="b1",
                      activation="keyword", required=False, priority=5),
        SkillLoaded(skill_id="skill.refunds", version="1.2.0", build_id="b1",
                    content_hash=hypha.content_hash, chars=len(active.text),
                    tokens=len(active.text) // 4, assets=1, truncated=False)]
    for event in events:  # counts, ids and hashes only
        assert "Orders younger" not in str(event.dump())


def test_a_token_counter() -> None:
    events, [active] = run(SkillRequest(attached=["a"]), skill("a"), token_counter=len)
    assert isinstance(events[1], SkillLoaded) and events[1].tokens == len("a instructions")


def test_the_text_is_cut_to_the_budget(tmp_path: Path) -> None:
    root = write_skill(tmp_path, "s", {"name": "s", "description": "d",
                                       "on_activation": ["one.md", "two.md"]}, "i" * 50,
                       files={"one.md": "o" * 50, "two.md": "t" * 50})
    long = load_skill(root)
    text, reached, truncated = skill_text(long, 100)
    assert len(text) == 100 and truncated and text.endswith(TRUNCATION_MARK)
    assert reached == 1
    assert skill_text(long, 100) == (text, reached, truncated)  # deterministic
    full, reached, truncated = skill_text(long, 10_000)
    assert (reached, truncated) == (2, False)
    assert full == "i" * 50 + "\n\n## one.md\n\n" + "o" * 50 + "\n\n## two.md\n\n" + "t" * 50


def test_budgets_call_then_skill_then_limits() -> None:
    s = Skill(name="s", description="d", instructions="x" * 5000, context_budget=300)
    _events, [a] = run(SkillRequest(attached=["s"]), s)
    assert a.chars == 300 and a.truncated  # type: ignore[attr-defined]
    _events, [b] = run(SkillRequest(attached=["s"]), s, max_chars=50)
    assert b.chars == 50  # type: ignore[attr-defined]
    plain = Skill(name="p", description="d", instructions="x" * 5000)
    _events, [c] = run(SkillRequest(attached=["p"]), plain)
    assert c.chars == 4000  # type: ignore[attr-defined]
    _events, [d] = run(SkillRequest(attached=["p"]), plain, limits=SkillLimits(max_chars=10))
    assert d.text == "x" * 10  # type: ignore[attr-defined]  # too small for the mark


def test_scenario_21_required_skill_not_attached() -> None:
    events: list[Payload] = []
    selection = select_skills(SkillRegistry([skill("skill.required"), skill("other")]),
                              SkillRequest(attached=["other"], required=["skill.required"]))
    with pytest.raises(RequiredSkillFailed) as caught:
        activate_skills(selection, emit=events.append)
    assert str(caught.value) == ("Required skills failed to load: skill.required "
                                 "(Required skill is not attached to the agent.)")
    assert caught.value.failures == [("skill.required",
                                      "Required skill is not attached to the agent.")]
    assert events[0] == SkillFailed(skill_id="skill.required", required=True,
                                    reason="Required skill is not attached to the agent.")


def test_scenario_21_an_untrusted_required_skill_is_denied() -> None:
    events: list[Payload] = []
    bad = skill("skill.untrusted", trust=TrustLevel.UNTRUSTED)
    selection = select_skills(SkillRegistry([bad]), SkillRequest(
        attached=["skill.untrusted"], required=["skill.untrusted"]))
    with pytest.raises(RequiredSkillFailed) as caught:
        activate_skills(selection, emit=events.append)
    reason = "Skill skill.untrusted trustLevel=untrusted is not allowed."
    assert str(caught.value) == f"Required skills failed to load: skill.untrusted ({reason})"
    assert [type(e) for e in events] == [SkillSelected, SkillFailed]
    assert events[1] == SkillFailed(skill_id="skill.untrusted", required=True, reason=reason)


def test_an_optional_denied_skill_is_skipped_with_an_event() -> None:
    events, active = run(SkillRequest(attached=["bad", "good"]),
                         skill("bad", trust=TrustLevel.UNTRUSTED), skill("good"))
    assert [a.id for a in active] == ["good"]  # type: ignore[attr-defined]
    assert [type(e).__name__ for e in events] == ["SkillSelected", "SkillFailed",
                                                  "SkillSelected", "SkillLoaded"]
    assert isinstance(events[1], SkillFailed) and not events[1].required


def test_every_required_failure_is_listed() -> None:
    selection = select_skills(SkillRegistry([
        skill("tools", required_tools=("missing",)), skill("off", enabled=False)]),
        SkillRequest(attached=["tools", "off"], required=["tools", "off", "gone"]))
    with pytest.raises(RequiredSkillFailed) as caught:
        activate_skills(selection)
    assert caught.value.failures == [
        ("off", "Skill is disabled."),
        ("gone", "Required skill is not attached to the agent."),
        ("tools", "Skill tools requires unavailable tools: missing."),
    ]


def test_too_many_references_built_in_code_fail_to_load() -> None:
    refs = tuple(SkillReference(f"r{i}.md", "x", "0" * 64) for i in range(3))
    events, active = run(SkillRequest(attached=["s"]), skill("s", references=refs),
                         limits=SkillLimits(max_activation_assets=2))
    assert active == []
    assert isinstance(events[1], SkillFailed)
    assert events[1].reason == "Skill s exceeds the 2 activation asset limit."


def test_rejected_optional_skills_write_no_event() -> None:
    quiet = skill("q", activation=Activation(ActivationMode.KEYWORD, ("never",)))
    events, active = run(SkillRequest(attached=["q", "ghost"]), quiet)
    assert events == [] and active == []


def test_complete_skills() -> None:
    _events, active = run(SkillRequest(attached=["a", "b"]), skill("a"),
                          skill("b", version="3", side_effect_policy=SideEffectPolicy.NONE))
    done: list[Payload] = []
    complete_skills(active, 4, done.append, build_id="b9")  # type: ignore[arg-type]
    assert done == [SkillCompleted(skill_id="a", build_id="b9", step=4),
                    SkillCompleted(skill_id="b", version="3", build_id="b9", step=4)]
    complete_skills(active, 4, None)  # type: ignore[arg-type]  # no sink: nothing
