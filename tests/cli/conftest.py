from __future__ import annotations

from dataclasses import dataclass

import pytest

from hypha_celery import Event, Hypha, Settings
from hypha_celery.demo import run_demo


@dataclass(frozen=True)
class DemoRun:
    store_url: str
    run_id: str
    events: list[Event]
    result: object


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One real run of the demo graph on the embedded runtime, in a SQLite store."""
    url = f"sqlite:///{tmp_path_factory.mktemp('demo') / 'hypha.db'}"
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=url, embedded=True))
    try:
        run, result = run_demo(hypha)
        return DemoRun(url, run.id, run.events(), result)
    finally:
        hypha.close()
