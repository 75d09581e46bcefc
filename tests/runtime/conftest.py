from __future__ import annotations

from collections.abc import Iterator

import pytest

from hypha_celery import Hypha
from tests.runtime.support import running


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    """A fresh embedded Hypha per test (its own Celery app, worker and SQLite file)."""
    with running(sqlite_url) as app:
        yield app
