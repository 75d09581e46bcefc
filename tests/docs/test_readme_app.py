"""README's 30-second example splits an app module (``# myapp.py``) from its client: a
worker that imports the app module (``hypha worker --app myapp:hypha``) gets the app at
once. When the module also started a run and waited on it, the worker's import waited
for a run no worker could take (``importing 'myapp' failed: WaitTimeout``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from hypha_celery import Hypha
from hypha_celery.loading import load_object
from tests.docs.test_examples import EXAMPLES, ROOT, is_module


def readme_module(name: str) -> str:
    [source] = [e.source for e in EXAMPLES if e.path == ROOT / "README.md" and is_module(e)
                and e.source.startswith(f"# {name}\n")]
    return source


def test_the_readme_app_module_imports_at_once_in_a_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    (tmp_path / "myapp.py").write_text(readme_module("myapp.py"))
    monkeypatch.setenv("HYPHA_BROKER_URL", redis_url)  # workers in other processes
    monkeypatch.setenv("HYPHA_STORE_URL", f"sqlite:///{tmp_path / 'hypha.db'}")
    monkeypatch.setattr(sys, "path", list(sys.path))
    began = time.monotonic()
    try:
        hypha = load_object("myapp:hypha", cwd=tmp_path)  # what `hypha worker --app` does
    finally:
        sys.modules.pop("myapp", None)
    try:
        assert time.monotonic() - began < 5.0
        assert isinstance(hypha, Hypha) and not hypha.settings.embedded
        assert list(hypha.graphs) == ["support"]
        assert hypha.store.export_runs() == []  # importing it started nothing
    finally:
        hypha.close()
