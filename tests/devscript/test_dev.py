"""``./dev`` on a fresh machine: its install says what it does (steps, a line per package
pip collects), makes the stamp, and the next call installs nothing. Python and pip are a
fake here (a script that records its calls and prints what pip prints), so the test runs
the real ``./dev`` in a second, not a 90-second install."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_CALLS"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
fi
case "$*" in
  *"-e .[dev]"*)
    echo "Obtaining file://$PWD"
    echo "Collecting celery>=5.3 (from hypha-celery==0.1.0)"
    echo "  Downloading celery-5.4.0-py3-none-any.whl (425 kB)"
    echo "Collecting kombu<6.0,>=5.3.4 (from celery>=5.3->hypha-celery==0.1.0)"
    if [ -n "${FAKE_FAIL:-}" ]; then
      echo "ERROR: Could not find a version that satisfies the requirement nothing" >&2
      exit 1
    fi
    echo "Installing collected packages: kombu, celery, hypha-celery"
    echo "Successfully installed celery-5.4.0 hypha-celery-0.1.0 kombu-5.3.7"
    ;;
esac
"""


def dev(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    full = {**os.environ, "PYTHON": str(fake), "HYPHA_VENV": str(tmp_path / "venv"),
            "FAKE_CALLS": str(tmp_path / "calls"), **env}
    return subprocess.run([str(ROOT / "dev"), *args], env=full, capture_output=True,
                          text=True, timeout=60)


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_the_first_call_shows_its_steps_and_each_package(tmp_path: Path) -> None:
    first = dev(tmp_path, "sh", "-c", "echo ran; command -v python")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["ran", str(tmp_path / "venv" / "bin" / "python")]
    venv = tmp_path / "venv"
    assert first.stderr.splitlines() == [
        f"dev: installing hypha-celery[dev] into {venv} (the first time takes a minute or two)",
        f"dev: [1/3] creating the virtualenv ({tmp_path / 'python'} -m venv {venv})",
        "dev: [2/3] upgrading pip",
        "dev: [3/3] installing hypha-celery[dev] and its dependencies (pip's output: "
        f"{venv}/pip-install.log)",
        "dev:   [1] celery>=5.3",
        "dev:   [2] kombu<6.0,>=5.3.4",
        "dev:   installed 3 packages",
        "dev: ready (installed again when pyproject.toml changes)"]
    assert "Downloading celery" in (venv / "pip-install.log").read_text()
    assert [c.split()[:3] for c in calls(tmp_path)] == [
        ["-m", "venv", str(venv)], ["-m", "pip", "install"], ["-m", "pip", "install"]]
    [stamp] = venv.glob(".installed-*")

    again = dev(tmp_path, "echo", "again")
    assert (again.returncode, again.stdout, again.stderr) == (0, "again\n", "")
    assert len(calls(tmp_path)) == 3 and list(venv.glob(".installed-*")) == [stamp]


def test_a_failed_install_shows_pips_error_and_leaves_no_stamp(tmp_path: Path) -> None:
    failed = dev(tmp_path, "echo", "never", FAKE_FAIL="1")
    assert failed.returncode == 1 and failed.stdout == ""
    err = failed.stderr
    assert "ERROR: Could not find a version" in err
    assert f"dev: pip install failed; the end of {tmp_path / 'venv'}/pip-install.log:" in err
    assert not list((tmp_path / "venv").glob(".installed-*"))
    retried = dev(tmp_path, "echo", "now")
    assert retried.returncode == 0 and retried.stdout == "now\n", retried.stderr
    assert "dev: [1/3] the virtualenv" in retried.stderr  # made once, kept

