"""``SKILL.md`` front matter: fields, spellings, defaults, and typed errors naming the
file and the field."""

from __future__ import annotations

import pytest

from hypha_celery.errors import SkillError
from hypha_celery.skills import (
    Activation,
    ActivationMode,
    SideEffectPolicy,
    SkillLimits,
    TrustLevel,
    parse_skill,
)
from tests.skills.helpers import skill_md


def test_the_smallest_skill_has_hypha_defaults() -> None:
    skill = parse_skill(skill_md({"name": "tone", "description": "Friendly tone."},
                                 "\n  Be kind.  \n"))
    assert (skill.id, skill.name, skill.description, skill.instructions) == (
        "tone", "tone", "Friendly tone.", "Be kind.")
    assert skill.version is None and skill.priority == 0 and skill.enabled
    assert skill.activation == Activation(ActivationMode.ALWAYS, ())
    assert skill.trust is TrustLevel.REVIEWED
    assert skill.allowed_tools is None and skill.required_tools == ()
    assert skill.side_effect_policy is SideEffectPolicy.INHERIT
    assert len(skill.content_hash) == 64


def test_every_field_in_snake_case() -> None:
    skill = parse_skill(skill_md({
        "name": "refunds", "id": "skill.refunds", "description": "d", "version": "2.0",
        "activation": {"mode": "regex", "patterns": ["refund(s)?"]}, "trust": "trusted",
        "priority": 7, "allowed_tools": ["a", "b"], "required_tools": ["a"],
        "side_effect_policy": "human_review", "context_budget": 500, "enabled": False}))
    assert skill.id == "skill.refunds" and skill.version == "2.0"
    assert skill.activation == Activation(ActivationMode.REGEX, ("refund(s)?",))
    assert skill.trust is TrustLevel.TRUSTED and skill.priority == 7
    assert skill.allowed_tools == ("a", "b") and skill.required_tools == ("a",)
    assert skill.side_effect_policy is SideEffectPolicy.HUMAN_REVIEW
    assert skill.context_budget == 500 and not skill.enabled


def test_hypha_camel_case_spellings() -> None:
    skill = parse_skill(skill_md({
        "name": "n", "description": "d", "trustLevel": "untrusted",
        "activationPolicy": {"mode": "intent", "patterns": ["billing"]},
        "allowedTools": ["x"], "requiredTools": ["x"], "sideEffectPolicy": "write",
        "contextBudget": 100}))
    assert skill.trust is TrustLevel.UNTRUSTED
    assert skill.activation == Activation(ActivationMode.INTENT, ("billing",))
    assert skill.allowed_tools == ("x",) and skill.required_tools == ("x",)
    assert skill.side_effect_policy is SideEffectPolicy.WRITE and skill.context_budget == 100


@pytest.mark.parametrize(("value", "tools"), [
    ("Read, Grep, Glob", ("Read", "Grep", "Glob")),
    ("Bash(git status:*) Read", ("Bash(git status:*)", "Read")),
    (["Read", "Edit"], ("Read", "Edit")),
])
def test_claude_code_allowed_tools(value: object, tools: tuple[str, ...]) -> None:
    skill = parse_skill(skill_md({"name": "n", "description": "d", "allowed-tools": value}))
    assert skill.allowed_tools == tools


def test_activation_shorthands() -> None:
    keyword = parse_skill(skill_md({"name": "n", "description": "d", "activation": {
        "mode": "keyword", "keywords": ["Refund"]}}))
    assert keyword.activation == Activation(ActivationMode.KEYWORD, ("Refund",))
    manual = parse_skill(skill_md({"name": "n", "description": "d", "activation": "manual"}))
    assert manual.activation.mode is ActivationMode.MANUAL


def test_unknown_keys_are_metadata_in_their_spelling() -> None:
    skill = parse_skill(skill_md({"name": "n", "description": "d", "license": "MIT",
                                  "reviewedBy": "me", "released": "2024-01-02",
                                  "metadata": {"a": [1, 2]}}))
    assert skill.metadata == {"license": "MIT", "reviewedBy": "me", "released": "2024-01-02",
                              "metadata": {"a": [1, 2]}}


def test_a_yaml_date_in_metadata_becomes_text() -> None:
    skill = parse_skill("---\nname: n\ndescription: d\nsince: 2024-01-02\n---\nx\n")
    assert skill.metadata == {"since": "2024-01-02"}


def test_the_content_hash_is_of_the_bytes() -> None:
    a = parse_skill(skill_md({"name": "n", "description": "d"}, "one"))
    b = parse_skill(skill_md({"name": "n", "description": "d"}, "one"))
    c = parse_skill(skill_md({"name": "n", "description": "d"}, "two"))
    assert a.content_hash == b.content_hash != c.content_hash


def _error(text: str, **kw: object) -> SkillError:
    with pytest.raises(SkillError) as caught:
        parse_skill(text, path="skills/x/SKILL.md", **kw)  # type: ignore[arg-type]
    assert caught.value.path == "skills/x/SKILL.md"
    return caught.value


@pytest.mark.parametrize(("text", "field", "words"), [
    ("no front matter\n", None, "no front matter"),
    ("---\nname: n\n", None, "no closing"),
    ("---\nname: [unclosed\n---\n", None, "not valid YAML"),
    ("---\n---\nbody\n", None, "empty"),
    ("---\n- a list\n---\n", None, "not a mapping"),
    ("---\ndescription: d\n---\n", "name", "required"),
    ("---\nname: n\n---\n", "description", "required"),
    ("---\nname: 3\ndescription: d\n---\n", "name", "a string, got an integer"),
    ("---\nname: n\ndescription: d\nversion: 1.10\n---\n", "version", "quote it"),
    ("---\nname: n\ndescription: d\npriority: high\n---\n", "priority", "an integer"),
    ("---\nname: n\ndescription: d\npriority: true\n---\n", "priority", "an integer"),
    ("---\nname: n\ndescription: d\ntrust: maybe\n---\n", "trust", "trusted, reviewed"),
    ("---\nname: n\ndescription: d\nactivation: sometimes\n---\n", "activation.mode",
     "always, keyword"),
    ("---\nname: n\ndescription: d\nactivation: keyword\n---\n", "activation", "needs patterns"),
    ("---\nname: n\ndescription: d\nactivation: {mode: intent, keywords: [a]}\n---\n",
     "activation.keywords", "belongs to mode keyword"),
    ("---\nname: n\ndescription: d\nallowed_tools: {a: 1}\n---\n", "allowed_tools",
     "a list of strings"),
    ("---\nname: n\ndescription: d\nallowedTools: [a]\nallowed-tools: b\n---\n",
     "allowed-tools", "twice"),
    ("---\nname: has space\ndescription: d\n---\n", "name", "not a skill id"),
    ("---\nname: n\ndescription: d\nside_effect_policy: maybe\n---\n", "side_effect_policy",
     "human_review"),
    ("---\nname: n\ndescription: d\ncontext_budget: 0\n---\n", "context_budget", "positive"),
    ("---\nname: n\ndescription: d\nx: .nan\n---\n", "x", "not a JSON number"),
    ("---\nname: n\ndescription: d\non_activation: [a.md]\n---\n", "on_activation",
     "load the skill's directory"),
])
def test_bad_front_matter_names_file_and_field(text: str, field: str | None,
                                               words: str) -> None:
    error = _error(text)
    assert error.field == field
    assert words in str(error)
    assert str(error).startswith("skills/x/SKILL.md: ")


def test_an_alias_bomb_is_bounded() -> None:
    lines = ["---", "name: n", "description: d", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
              for i in range(1, 12)]
    error = _error("\n".join([*lines, "---", "x"]))
    assert "more than 10000 values" in str(error)


def test_deep_nesting_is_bounded() -> None:
    error = _error("---\nname: n\ndescription: d\nx: " + "[" * 40 + "]" * 40 + "\n---\n")
    assert "nested deeper than 32" in str(error)


def test_a_big_skill_text_is_refused() -> None:
    error = _error(skill_md({"name": "n", "description": "d"}, "x" * 300),
                   limits=SkillLimits(max_file_bytes=200))
    assert "more than the bound of 200" in str(error)
