"""A pack's skills: the skill directories it declares (``skills``, relative to the pack
file), loaded and checked with the pack, and the skill bindings it makes (hypha's
``allowedSkills`` and ``defaultSkills``; a state's ``allowedSkills`` and
``requiredSkills``). Every problem is a pack problem naming its path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from hypha_celery.packs._model import DomainPack
from hypha_celery.packs._paths import Problem, path
from hypha_celery.skills import Skill, SkillRegistry, scan_skills

__all__ = ["load_skills", "skill_binding_problems"]


def load_skills(pack: DomainPack, base_dir: Path | None) -> tuple[SkillRegistry | None,
                                                                   list[Problem]]:
    """The registry of the skills ``pack`` declares (``None`` when it declares none) and
    the problems of loading them; directories are relative to ``base_dir`` (the pack
    file's directory; default the working directory)."""
    if pack.skills is None:
        return None, []
    base = base_dir if base_dir is not None else Path.cwd()
    found: dict[str, tuple[Skill, int]] = {}
    problems: list[Problem] = []
    for i, rel in enumerate(pack.skills):
        scan = scan_skills(base / rel)
        problems += [(path("skills", i), str(e)) for e in scan.errors]
        if not scan.skills and not scan.errors:
            problems.append((path("skills", i), f"no SKILL.md in {rel} nor in its "
                                                "subdirectories"))
        for skill in scan.skills:
            if skill.id in found:
                problems.append((path("skills", i), f"skill id {skill.id!r} is also in "
                                                    f"skills[{found[skill.id][1]}]"))
                continue
            found[skill.id] = (skill, i)
    return SkillRegistry(s for s, _ in found.values()), problems


def skill_binding_problems(pack: DomainPack, registry: SkillRegistry | None) -> list[Problem]:
    """Skill ids that name no declared skill (when the pack declares skills), bindings
    outside the pack's ``allowed_skills``, and a state's required skills outside its own
    ``allowed_skills``."""
    return list(_bindings(pack, registry))


def _bindings(pack: DomainPack, registry: SkillRegistry | None) -> Iterator[Problem]:
    allowed = None if pack.allowed_skills is None else frozenset(pack.allowed_skills)
    refs: list[tuple[str, list[str]]] = [("allowed_skills", pack.allowed_skills or []),
                                         ("default_skills", pack.default_skills or [])]
    for w, wf in enumerate(pack.workflows):
        for s, state in enumerate(wf.states):
            at = path("workflows", w, "states", s)
            refs += [(f"{at}.allowed_skills", state.allowed_skills or []),
                     (f"{at}.required_skills", state.required_skills or [])]
            own = None if state.allowed_skills is None else frozenset(state.allowed_skills)
            for skill_id in state.required_skills or []:
                if own is not None and skill_id not in own:
                    yield (f"{at}.required_skills", f"required skill {skill_id!r} is not in "
                                                    "the state's allowed_skills")
    for where, ids in refs:
        for skill_id in ids:
            if registry is not None and skill_id not in registry:
                yield where, (f"unknown skill {skill_id!r} (the pack's skills: "
                              f"{', '.join(registry.ids) or 'none'})")
            elif allowed is not None and where != "allowed_skills" and skill_id not in allowed:
                yield where, f"skill {skill_id!r} is not in the pack's allowed_skills"
