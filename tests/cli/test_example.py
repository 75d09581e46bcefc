"""``examples.support`` works with ``hypha worker --app`` and with plain Celery."""

from __future__ import annotations

from celery.app.utils import find_app

from hypha_celery import Hypha
from hypha_celery.cli.loading import load_app
from tests.cli.helpers import ROOT


def test_the_example_module_serves_both_command_lines() -> None:
    hypha = load_app("examples.support:hypha", cwd=ROOT)
    assert isinstance(hypha, Hypha)
    assert "support" in hypha.graphs
    assert find_app("examples.support") is hypha.celery  # celery -A examples.support worker
    assert find_app("examples.support:celery") is hypha.celery
    assert {"support.classify", "support.lookup", "support.merge", "support.answer",
            "hypha.coordinator"} <= set(hypha.celery.tasks)
