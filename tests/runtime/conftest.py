from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery.signals import before_task_publish

from hypha_celery import Hypha
from tests.runtime.support import running


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    """A fresh embedded Hypha per test (its own Celery app, worker and SQLite file)."""
    with running(sqlite_url) as app:
        yield app


@pytest.fixture
def published() -> Iterator[list[str]]:
    """Names of the tasks published while the test runs."""
    names: list[str] = []

    def record(sender: Any = None, **kwargs: Any) -> None:
        names.append(str(sender))

    before_task_publish.connect(record, weak=False)
    yield names
    before_task_publish.disconnect(record)
