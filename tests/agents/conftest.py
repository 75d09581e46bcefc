"""The GenAgent scenario world every agents test module shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.agents.support import World


@pytest.fixture
def w(sqlite_url: str) -> Iterator[World]:
    """Agents on a private SQLite store, served in-process; closed after the test."""
    world = World(sqlite_url)
    try:
        yield world
    finally:
        world.close()
