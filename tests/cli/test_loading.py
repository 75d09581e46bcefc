"""``--app MODULE:ATTR``: import from the working directory, insist on a Hypha."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hypha_celery import Hypha
from hypha_celery.cli.loading import AppLoadError, embedded_settings, load_app
from hypha_celery.errors import HyphaError

APP = """
from hypha_celery import Hypha, Settings
hypha = Hypha(Settings("memory://", "cache+memory://", "sqlite://", True))
class holder:
    inner = hypha
number = 42
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Unique module names written to ``tmp_path`` (the 'working directory')."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    tag = uuid.uuid4().hex[:8]
    names = {"app": f"app_{tag}", "broken": f"broken_{tag}", "needs": f"needs_{tag}"}
    (tmp_path / f"{names['app']}.py").write_text(APP)
    (tmp_path / f"{names['broken']}.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / f"{names['needs']}.py").write_text("import no_such_dependency_xyz\n")
    yield names
    for name in names.values():
        sys.modules.pop(name, None)


def test_loads_a_hypha_from_the_working_directory(modules: dict[str, str],
                                                  tmp_path: Path) -> None:
    app = load_app(f"{modules['app']}:hypha", cwd=tmp_path)
    assert isinstance(app, Hypha)
    assert load_app(f"{modules['app']}:holder.inner", cwd=tmp_path) is app


@pytest.mark.parametrize(("spec", "message"), [
    ("{app}", "must look like MODULE:ATTR"),
    ("{app}:", "must look like MODULE:ATTR"),
    (":hypha", "must look like MODULE:ATTR"),
    ("{app}:nope", "has no attribute 'nope'"),
    ("{app}:number", "is a int, not a Hypha instance"),
    ("no_such_module_xyz:hypha", "no module named 'no_such_module_xyz'"),
    ("no_such_pkg_xyz.sub:hypha", "no module named 'no_such_pkg_xyz.sub'"),
    ("{broken}:hypha", "RuntimeError: boom at import"),
    ("{needs}:hypha", "No module named 'no_such_dependency_xyz'"),
])
def test_bad_specs_raise_one_readable_error(modules: dict[str, str], tmp_path: Path,
                                            spec: str, message: str) -> None:
    with pytest.raises(AppLoadError) as info:
        load_app(spec.format(**modules), cwd=tmp_path)
    assert message in str(info.value)
    assert isinstance(info.value, HyphaError)


def test_embedded_settings_ignore_the_broker_but_keep_the_store() -> None:
    s = embedded_settings({"HYPHA_BROKER_URL": "redis://x:1/0", "HYPHA_STORE_URL": "sqlite://"})
    assert s.embedded and s.broker_url == "memory://" and s.store_url == "sqlite://"


def test_embedded_settings_fall_back_when_the_cwd_is_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert embedded_settings({}).store_url == "sqlite:///.hypha/hypha.db"
    assert (tmp_path / ".hypha").is_dir()
    readonly = tmp_path / "ro"
    readonly.mkdir()
    monkeypatch.chdir(readonly)
    monkeypatch.setattr("os.access", lambda path, mode: False)
    url = embedded_settings({}).store_url
    assert url.startswith("sqlite:////") and url.endswith("/hypha.db")
