"""The GenAgent scenario world every agents test module shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hypha_celery import Hypha
from tests.agents.support import World
from tests.runtime.support import embedded


@pytest.fixture
def w(sqlite_url: str) -> Iterator[World]:
    """Agents on a private SQLite store, served in-process; closed after the test."""
    world = World(sqlite_url)
    try:
        yield world
    finally:
        world.close()


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    """An embedded Hypha on a private SQLite store; closed after the test."""
    h = embedded(sqlite_url)
    try:
        yield h
    finally:
        h.close()
