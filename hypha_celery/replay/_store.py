"""Replay fixtures as files: ``<dir>/<safe id>.replay.json``, pretty JSON plus a newline."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import ValidationError

from hypha_celery.atomic import write_atomically
from hypha_celery.errors import InvalidFixture
from hypha_celery.replay._fixture import FIXTURE_VERSION, ReplayFixture

#: Largest fixture file :func:`read_fixture` reads (bytes), checked before reading it.
MAX_FIXTURE_BYTES = 64 * 1024 * 1024

SUFFIX = ".replay.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(fixture_id: str) -> str:
    """``fixture_id`` with every character outside ``[A-Za-z0-9._-]`` replaced by ``_``."""
    return _UNSAFE.sub("_", fixture_id) or "_"


def dump_fixture(fixture: ReplayFixture) -> str:
    return fixture.model_dump_json(indent=2) + "\n"


def write_fixture(fixture: ReplayFixture, path: str | os.PathLike[str]) -> Path:
    """Write ``fixture`` to ``path`` through a temporary file in the same directory (never
    a half-written fixture); creates the directory."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, lambda out: out.write(dump_fixture(fixture)))
    return target


def read_fixture(path: str | os.PathLike[str]) -> ReplayFixture:
    """Load a fixture file; :class:`InvalidFixture` names the file and the first problem
    (a missing file raises ``FileNotFoundError``)."""
    source = Path(path)
    try:
        if source.stat().st_size > MAX_FIXTURE_BYTES:
            raise InvalidFixture(f"{source}: the fixture is larger than {MAX_FIXTURE_BYTES} "
                                 "bytes (replay.MAX_FIXTURE_BYTES)")
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidFixture(f"{source}: cannot read the fixture ({exc})") from None
    try:
        fixture = ReplayFixture.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidFixture(f"{source}: not a replay fixture "
                             f"({f'{where}: ' if where else ''}{first['msg']})") from None
    if fixture.version != FIXTURE_VERSION:
        raise InvalidFixture(f"{source}: fixture version {fixture.version} is not supported "
                             f"(this hypha-celery reads version {FIXTURE_VERSION})")
    return fixture


class FileFixtureStore:
    """Fixtures in a directory, one file each. ``load`` of an unknown id is ``None``;
    ``list`` of a missing directory is ``[]``."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path_for(self, fixture_id: str) -> Path:
        return self.directory / f"{safe_name(fixture_id)}{SUFFIX}"

    def save(self, fixture: ReplayFixture) -> Path:
        return write_fixture(fixture, self.path_for(fixture.id))

    def load(self, fixture_id: str) -> ReplayFixture | None:
        try:
            return read_fixture(self.path_for(fixture_id))
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        """The fixtures' file names without the suffix, sorted: what :meth:`load` takes
        (each is its fixture's id made safe), read from the directory alone."""
        try:
            return sorted(p.name[:-len(SUFFIX)] for p in self.directory.iterdir()
                          if p.name.endswith(SUFFIX) and p.is_file())
        except FileNotFoundError:
            return []

    def list(self) -> list[ReplayFixture]:
        """Every fixture in the directory, sorted by file name."""
        return [read_fixture(self.directory / f"{name}{SUFFIX}") for name in self.names()]
