"""Skills (issue 26): ``SKILL.md`` packages bound to an agent or a workflow state,
selected per model call, checked by a policy and loaded within bounds::

    from hypha_celery.skills import (SkillRegistry, SkillRequest, activate_skills,
                                     select_skills)

    registry = SkillRegistry.from_dir("skills/")          # */SKILL.md; SkillError
    selection = select_skills(registry, SkillRequest(
        attached=["refunds", "tone"], text="I want a refund", required=["tone"],
        available_tools=["lookup_order"]))
    active = activate_skills(selection, emit=events.append)   # RequiredSkillFailed
    for skill in active:
        skill.text, skill.provenance, skill.allowed_tools

A ``SKILL.md`` is YAML front matter (``name``, ``description``, ``version``,
``activation``, ``trust``, ``priority``, ``allowed_tools``, ``required_tools``,
``side_effect_policy``, ``on_activation``, ``scripts``, ``assets``; hypha's camelCase
and Claude Code's kebab-case spellings too) and markdown instructions. Scripts and
assets are listed (path, size, SHA-256), never read into context nor executed. Every
bound is a field of :class:`SkillLimits`; docs/skills.md describes it all.
"""

from hypha_celery.skills._activate import (
    TRUNCATION_MARK,
    ActiveSkill,
    Emit,
    SkillProvenance,
    TokenCounter,
    activate_skills,
    complete_skills,
    skill_text,
)
from hypha_celery.skills._limits import SkillLimits
from hypha_celery.skills._loader import SKILL_FILE, SkillScan, load_skill, parse_skill, scan_skills
from hypha_celery.skills._manifest import ID_PATTERN
from hypha_celery.skills._model import (
    Activation,
    ActivationMode,
    SideEffectPolicy,
    Skill,
    SkillFile,
    SkillReference,
    TrustLevel,
)
from hypha_celery.skills._policy import POLICY_ID, SkillDecision, SkillPolicy
from hypha_celery.skills._registry import SkillRegistry
from hypha_celery.skills._select import (
    NOT_ATTACHED,
    RejectedSkill,
    SelectedSkill,
    SkillBinding,
    SkillRequest,
    SkillSelection,
    regex_matches,
    regex_problem,
    select_skills,
)

__all__ = [
    # the model
    "Activation",
    "ActivationMode",
    "ID_PATTERN",
    "SideEffectPolicy",
    "Skill",
    "SkillFile",
    "SkillReference",
    "TrustLevel",
    # loading, within bounds
    "SKILL_FILE",
    "SkillLimits",
    "SkillScan",
    "load_skill",
    "parse_skill",
    "scan_skills",
    "SkillRegistry",
    # selection
    "NOT_ATTACHED",
    "RejectedSkill",
    "SelectedSkill",
    "SkillBinding",
    "SkillRequest",
    "SkillSelection",
    "regex_matches",
    "regex_problem",
    "select_skills",
    # policy
    "POLICY_ID",
    "SkillDecision",
    "SkillPolicy",
    # activation (events through ``emit``)
    "TRUNCATION_MARK",
    "ActiveSkill",
    "Emit",
    "SkillProvenance",
    "TokenCounter",
    "activate_skills",
    "complete_skills",
    "skill_text",
]
