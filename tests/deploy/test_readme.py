"""deploy/README.md says what exists: every profile file it names loads and gives a worker
command line (``hypha worker --profile FILE --dry-run``), and no part is "in progress"."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import module_restored
from tests.cli.test_commands import invoke

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "deploy" / "README.md").read_text(encoding="utf-8")
PROFILES = sorted(set(re.findall(r"\bworkers/\w+\.py\b", README)))


@pytest.fixture(autouse=True)
def _fresh_app_module() -> Iterator[None]:
    """The app is imported here with a broker URL: later tests import their own."""
    with module_restored("examples.support"):
        yield


def test_the_readme_names_the_profile_files_and_nothing_in_progress() -> None:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "workers").glob("[!_]*.py"))
    assert files == PROFILES  # every profile file, and only those
    assert "in progress" not in README.lower()


@pytest.mark.parametrize("profile", PROFILES)
def test_each_named_profile_file_runs_a_worker(profile: str, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    monkeypatch.chdir(ROOT)
    result = invoke("worker", "--app", "examples.support:hypha", "--profile", profile,
                    "--dry-run", HYPHA_BROKER_URL="redis://127.0.0.1:1/0")
    assert result.exit_code == 0, result.output
    [line] = result.stdout.splitlines()
    assert line.startswith("celery worker --pool=") and "--queues=hypha." in line
