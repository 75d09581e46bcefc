"""``SkillRegistry``: skills by id (one version per id, as hypha's)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from hypha_celery.errors import SkillError, SkillNotFound
from hypha_celery.skills._limits import SkillLimits
from hypha_celery.skills._loader import scan_skills
from hypha_celery.skills._model import Skill

__all__ = ["SkillRegistry"]


class SkillRegistry:
    """Skills by id. :meth:`register` refuses a different skill under an id already
    held (registering the same skill again is a no-op); iteration is by priority
    (descending), then id."""

    def __init__(self, skills: Iterable[Skill] = ()) -> None:
        self._skills: dict[str, Skill] = {}
        for skill in skills:
            self.register(skill)

    @classmethod
    def from_dir(cls, directory: str | os.PathLike[str], *,
                 limits: SkillLimits | None = None) -> SkillRegistry:
        """The skills of ``directory`` (one skill directory, or a directory of them);
        the first problem found is raised (:func:`~hypha_celery.skills.scan_skills`
        reports them all)."""
        scan = scan_skills(directory, limits=limits or SkillLimits())
        if scan.errors:
            raise scan.errors[0]
        return cls(scan.skills)

    def register(self, skill: Skill) -> None:
        held = self._skills.get(skill.id)
        if held is not None and held != skill:
            raise SkillError(f"skill id {skill.id!r} is already registered (from "
                             f"{held.source or 'code'})", path=skill.source or "", field="id")
        self._skills[skill.id] = skill

    def get(self, skill_id: str, version: str | None = None) -> Skill:
        """The skill ``skill_id``; with ``version``, only that version.
        :class:`SkillNotFound` otherwise."""
        skill = self._skills.get(skill_id)
        if skill is None:
            raise SkillNotFound(f"no skill {skill_id!r} (registered: "
                                f"{', '.join(sorted(self._skills)) or 'none'})")
        if version is not None and skill.version != version:
            raise SkillNotFound(f"skill {skill_id!r} is version {skill.version or 'unversioned'}"
                                f", not {version}")
        return skill

    def find(self, skill_id: str) -> Skill | None:
        return self._skills.get(skill_id)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self)

    def __contains__(self, skill_id: object) -> bool:
        return skill_id in self._skills

    def __iter__(self) -> Iterator[Skill]:
        return iter(sorted(self._skills.values(), key=lambda s: (-s.priority, s.id)))

    def __len__(self) -> int:
        return len(self._skills)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SkillRegistry):
            return NotImplemented
        return self._skills == other._skills

    __hash__ = None  # type: ignore[assignment]  # mutable
