"""Loading skill directories: ``SKILL.md``, its ``on_activation`` references (read, within
bounds) and its scripts and assets (listed with size and SHA-256; never read into context,
never executed). A directory scan finds ``*/SKILL.md`` (or is one skill itself)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from hypha_celery.errors import SkillError
from hypha_celery.skills._files import hash_file, inside, read_bounded, relative_files
from hypha_celery.skills._limits import SkillLimits
from hypha_celery.skills._manifest import Manifest, parse_manifest
from hypha_celery.skills._model import Skill, SkillFile, SkillReference

__all__ = ["SKILL_FILE", "SkillScan", "load_skill", "parse_skill", "scan_skills"]

#: The file that makes a directory a skill.
SKILL_FILE = "SKILL.md"

_DEFAULT = SkillLimits()


def load_skill(directory: str | os.PathLike[str], *,
               limits: SkillLimits = _DEFAULT) -> Skill:
    """The skill in ``directory`` (which holds ``SKILL.md``); :class:`SkillError` names
    the file (and field) of the first problem."""
    root = Path(directory)
    if root.is_symlink():
        raise SkillError("a symlink: a skill directory may not be one", path=str(root))
    if not root.is_dir():
        raise SkillError("not a directory", path=str(root))
    skill_md = inside(root, SKILL_FILE, field=None)
    raw = read_bounded(skill_md, limits.max_file_bytes)
    manifest = parse_manifest(raw, path=str(skill_md), limits=limits)
    refs = _references(root, manifest, limits, len(raw))
    digest = hashlib.sha256(raw)
    for ref, data in refs:
        digest.update(b"\0" + ref.path.encode() + b"\0" + data)
    scripts = _listed(root, "scripts", manifest.scripts, limits, 0)
    assets = _listed(root, "assets", manifest.assets, limits, len(scripts))
    return _skill(manifest, references=tuple(ref for ref, _ in refs), scripts=scripts,
                  assets=assets, source=str(root), content_hash=digest.hexdigest())


def parse_skill(text: str, *, path: str = SKILL_FILE, limits: SkillLimits = _DEFAULT) -> Skill:
    """A skill from ``SKILL.md``'s text alone (no directory: it may not name
    ``on_activation`` references, scripts or assets)."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > limits.max_file_bytes:
        raise SkillError(f"{len(raw)} bytes, more than the bound of {limits.max_file_bytes}",
                         path=path)
    manifest = parse_manifest(raw, path=path, limits=limits)
    for key in ("on_activation", "scripts", "assets"):
        if getattr(manifest, key):
            raise SkillError("names files: load the skill's directory (load_skill)",
                             path=path, field=key)
    return _skill(manifest, references=(), scripts=(), assets=(), source=None,
                  content_hash=hashlib.sha256(raw).hexdigest())


@dataclass(frozen=True)
class SkillScan:
    """What a scan found: the skills that loaded and a :class:`SkillError` per problem."""

    skills: tuple[Skill, ...]
    errors: tuple[SkillError, ...]


def scan_skills(directory: str | os.PathLike[str], *,
                limits: SkillLimits = _DEFAULT) -> SkillScan:
    """The skills of ``directory``: itself when it holds ``SKILL.md``, else each of its
    subdirectories that does (sorted by name; at most ``limits.max_skills``). Every
    problem is reported, a skill id found twice too."""
    root = Path(directory)
    if (root / SKILL_FILE).exists() or (root / SKILL_FILE).is_symlink():
        dirs = [root]
    elif not root.is_dir():
        return SkillScan((), (SkillError("not a directory", path=str(root)),))
    else:
        dirs = sorted(d for d in root.iterdir()
                      if (d / SKILL_FILE).exists() or (d / SKILL_FILE).is_symlink())
    if len(dirs) > limits.max_skills:
        return SkillScan((), (SkillError(f"more than {limits.max_skills} skills in one "
                                         "directory", path=str(root)),))
    skills: list[Skill] = []
    errors: list[SkillError] = []
    seen: dict[str, str] = {}
    for d in dirs:
        try:
            skill = load_skill(d, limits=limits)
        except SkillError as exc:
            errors.append(exc)
            continue
        if skill.id in seen:
            errors.append(SkillError(f"skill id {skill.id!r} is also the id of {seen[skill.id]}",
                                     path=str(d / SKILL_FILE), field="id"))
            continue
        seen[skill.id] = str(d)
        skills.append(skill)
    return SkillScan(tuple(skills), tuple(errors))


def _references(root: Path, manifest: Manifest, limits: SkillLimits, used: int
                ) -> list[tuple[SkillReference, bytes]]:
    if len(manifest.on_activation) > limits.max_activation_assets:
        raise SkillError(f"{len(manifest.on_activation)} references, more than the "
                         f"{limits.max_activation_assets} activation asset limit",
                         path=str(root / SKILL_FILE), field="on_activation")
    out: list[tuple[SkillReference, bytes]] = []
    seen: set[str] = set()
    for rel in manifest.on_activation:
        file = inside(root, rel, field="on_activation")
        data = read_bounded(file, limits.max_file_bytes, field="on_activation")
        used += len(data)
        if used > limits.max_skill_bytes:
            raise SkillError(f"SKILL.md and its references hold more than "
                             f"{limits.max_skill_bytes} bytes", path=str(file),
                             field="on_activation")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SkillError("not UTF-8 text", path=str(file), field="on_activation") from None
        name = _posix(rel)
        if name in seen:
            continue
        seen.add(name)
        out.append((SkillReference(name, text, hashlib.sha256(data).hexdigest()), data))
    return out


def _listed(root: Path, folder: str, declared: tuple[str, ...] | None, limits: SkillLimits,
            before: int) -> tuple[SkillFile, ...]:
    """Scripts or assets as metadata: the declared paths, else the files of ``folder``."""
    budget = limits.max_metadata_files - before
    paths = (declared if declared is not None
             else relative_files(root, folder, budget, field=folder))
    if len(paths) > budget:
        raise SkillError(f"more than {limits.max_metadata_files} scripts and assets",
                         path=str(root / SKILL_FILE), field=folder)
    out = []
    for rel in dict.fromkeys(paths):
        file = inside(root, rel, field=folder)
        size, sha = hash_file(file, limits.max_metadata_file_bytes, field=folder)
        out.append(SkillFile(_posix(rel), size, sha))
    return tuple(out)


def _posix(rel: str) -> str:
    return PurePosixPath(rel.replace("\\", "/")).as_posix()


def _skill(m: Manifest, *, references: tuple[SkillReference, ...],
           scripts: tuple[SkillFile, ...], assets: tuple[SkillFile, ...], source: str | None,
           content_hash: str) -> Skill:
    return Skill(
        id=m.id, name=m.name, description=m.description, instructions=m.instructions,
        version=m.version, activation=m.activation, trust=m.trust, priority=m.priority,
        enabled=m.enabled, allowed_tools=m.allowed_tools, required_tools=m.required_tools,
        side_effect_policy=m.side_effect_policy, context_budget=m.context_budget,
        references=references, scripts=scripts, assets=assets, metadata=m.metadata,
        source=source, content_hash=content_hash)
