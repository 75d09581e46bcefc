"""Files of a skill directory: paths that stay inside it, never through a symlink, read
within a byte bound (``O_NOFOLLOW`` on the last component, ``fstat`` on what was opened).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path, PurePosixPath, PureWindowsPath

from hypha_celery.errors import SkillError

__all__ = ["hash_file", "inside", "read_bounded", "relative_files"]

_CHUNK = 64 * 1024
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def inside(root: Path, rel: object, *, field: str | None) -> Path:
    """``root / rel`` when ``rel`` is a relative path that stays inside ``root`` and has
    no symlink on the way; else :class:`SkillError` naming the file and ``field``."""
    where = str(root / rel) if isinstance(rel, str) else str(root)
    if not isinstance(rel, str) or not rel.strip() or "\0" in rel:
        raise SkillError("a path is a non-empty relative path", path=where, field=field)
    posix, windows = PurePosixPath(rel.replace("\\", "/")), PureWindowsPath(rel)
    if posix.is_absolute() or windows.is_absolute() or windows.drive:
        raise SkillError("an absolute path: paths are relative to the skill directory",
                         path=where, field=field)
    if ".." in posix.parts:
        raise SkillError("the path leaves the skill directory (..)", path=where, field=field)
    current = root
    for part in posix.parts:
        current = current / part
        if current.is_symlink():
            raise SkillError("a symlink: a skill's files may not pass through one",
                             path=str(current), field=field)
    try:
        resolved = current.resolve(strict=True)
    except (OSError, RuntimeError):
        raise SkillError("no such file", path=where, field=field) from None
    if not resolved.is_relative_to(root.resolve()):
        raise SkillError("the path leaves the skill directory", path=where, field=field)
    return current


def _regular(fd: int, file: Path, limit: int, field: str | None) -> None:
    """``fd`` is a regular file of at most ``limit`` bytes (else :class:`SkillError`)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise SkillError("not a regular file", path=str(file), field=field)
    if info.st_size > limit:
        raise SkillError(f"{info.st_size} bytes, more than the bound of {limit}",
                         path=str(file), field=field)


def read_bounded(file: Path, limit: int, *, field: str | None = None) -> bytes:
    """The bytes of the regular file ``file`` (not a symlink), at most ``limit``."""
    fd = _open(file, field)
    try:
        _regular(fd, file, limit, field)
        chunks, total = [], 0
        while chunk := os.read(fd, min(_CHUNK, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise SkillError(f"more than the bound of {limit} bytes", path=str(file),
                                 field=field)
        return b"".join(chunks)
    finally:
        os.close(fd)


def hash_file(file: Path, limit: int, *, field: str | None) -> tuple[int, str]:
    """Size and SHA-256 of ``file`` (read in chunks, never kept), at most ``limit`` bytes."""
    fd = _open(file, field)
    try:
        _regular(fd, file, limit, field)
        digest, total = hashlib.sha256(), 0
        while chunk := os.read(fd, _CHUNK):
            total += len(chunk)
            if total > limit:
                raise SkillError(f"more than the bound of {limit} bytes", path=str(file),
                                 field=field)
            digest.update(chunk)
        return total, digest.hexdigest()
    finally:
        os.close(fd)


def relative_files(root: Path, folder: str, limit: int, *, field: str | None) -> list[str]:
    """The files under ``root / folder`` (recursively, sorted), as paths relative to
    ``root``; a symlink is refused, more than ``limit`` files is refused."""
    top = root / folder
    if top.is_symlink():
        raise SkillError("a symlink: a skill's files may not pass through one",
                         path=str(top), field=field)
    if not top.is_dir():
        return []
    found: list[str] = []
    todo, seen = [top], 0
    while todo:
        current = todo.pop()
        for entry in sorted(current.iterdir()):
            seen += 1
            if seen > 4 * limit:
                raise SkillError(f"more than {4 * limit} entries", path=str(top), field=field)
            if entry.is_symlink():
                raise SkillError("a symlink: a skill's files may not pass through one",
                                 path=str(entry), field=field)
            if entry.is_dir():
                todo.append(entry)
            elif entry.is_file():
                found.append(entry.relative_to(root).as_posix())
                if len(found) > limit:
                    raise SkillError(f"more than {limit} files", path=str(top), field=field)
    return sorted(found)


def _open(file: Path, field: str | None) -> int:
    try:
        return os.open(file, os.O_RDONLY | _NOFOLLOW)
    except OSError as exc:
        why = "a symlink" if file.is_symlink() else exc.strerror or "cannot open it"
        raise SkillError(f"cannot read it: {why}", path=str(file), field=field) from None
