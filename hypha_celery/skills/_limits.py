"""The loader's bounds (hypha's ``SkillContextLoader`` plus the ones a directory scan
and a front matter need): every count and every byte size explicit."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SkillLimits"]


@dataclass(frozen=True)
class SkillLimits:
    """Bounds on loading and activating skills (docs/skills.md, "Bounds").

    * ``max_chars`` (4000): characters of instructions plus ``on_activation`` text one
      active skill puts into context (hypha's default); a skill's ``context_budget``
      or the caller's ``max_chars`` override it. Past it the text is cut and flagged
      ``truncated``.
    * ``max_activation_assets`` (32): ``on_activation`` references of one skill.
    * ``max_file_bytes`` (256 KiB): ``SKILL.md`` and each reference read as text.
    * ``max_skill_bytes`` (1 MiB): ``SKILL.md`` plus its references, together.
    * ``max_metadata_files`` (256): scripts plus assets listed (path, size, SHA-256).
    * ``max_metadata_file_bytes`` (16 MiB): one script or asset (hashed in 64 KiB
      chunks, never read into context, never executed).
    * ``max_skills`` (256): skills one directory scan finds.
    * ``max_front_matter_values`` (10,000) and ``max_front_matter_depth`` (32): values
      and nesting of the YAML front matter (an alias counts each time it is used).
    """

    max_chars: int = 4000
    max_activation_assets: int = 32
    max_file_bytes: int = 256 * 1024
    max_skill_bytes: int = 1024 * 1024
    max_metadata_files: int = 256
    max_metadata_file_bytes: int = 16 * 1024 * 1024
    max_skills: int = 256
    max_front_matter_values: int = 10_000
    max_front_matter_depth: int = 32

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SkillLimits.{name} is a positive integer, got {value!r}")
