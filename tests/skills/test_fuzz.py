"""Arbitrary front matter: a skill or a :class:`SkillError`, nothing else (hypothesis,
derandomized, no example database)."""

from __future__ import annotations

import string
from datetime import timedelta

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hypha_celery.errors import SkillError
from hypha_celery.skills import Skill, parse_skill

FUZZ = settings(database=None, derandomize=True, max_examples=300,
                deadline=timedelta(seconds=2))

KEYS = st.sampled_from([
    "name", "description", "version", "id", "activation", "activationPolicy", "trust",
    "trustLevel", "priority", "enabled", "disabled", "allowed_tools", "allowed-tools",
    "allowedTools", "required_tools", "side_effect_policy", "sideEffectPolicy",
    "context_budget", "on_activation", "references", "scripts", "assets", "instructions",
    "mode", "patterns", "keywords", "license", "metadata", "x"])
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats()
           | st.text(max_size=12) | st.dates()
           | st.sampled_from(["always", "keyword", "regex", "intent", "manual", "trusted",
                              "untrusted", "human_review", "a, b", "(a+)+", "../x"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(KEYS | st.text(max_size=6), inner, max_size=4),
                      max_leaves=20)
DOCS = st.dictionaries(KEYS, VALUES, max_size=8)


def _parse(text: str) -> Skill | None:
    try:
        return parse_skill(text)
    except SkillError:
        return None


@FUZZ
@given(DOCS)
def test_any_front_matter_document(doc: dict[str, object]) -> None:
    try:
        head = yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return
    skill = _parse(f"---\n{head}---\nbody\n")
    if skill is not None:
        assert skill.id and skill.description


@FUZZ
@given(st.text(alphabet=string.printable + "éü\u2028\ufeff&*!|>{}[]", max_size=300))
def test_any_front_matter_text(head: str) -> None:
    _parse(f"---\n{head}\n---\nbody\n")


@FUZZ
@given(st.text(max_size=300))
def test_any_file_text(text: str) -> None:
    _parse(text)
