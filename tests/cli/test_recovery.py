"""``hypha dlq``, ``hypha quarantine`` and ``hypha sweep`` against a real store (the
embedded runtime: the command's own process runs what it re-enqueues)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hypha_celery import Hypha, Settings
from tests.cli import recovery_app
from tests.cli.helpers import assert_one_line_error, clean_env, hypha
from tests.cli.recovery_app import quarantined
from tests.runtime.support import WAIT, wait_until

APP = "tests.cli.recovery_app:hypha"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hypha.db'}"


@pytest.fixture
def lib(store: str) -> Iterator[Hypha]:
    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=store, embedded=True))
    h.register(recovery_app.PARK)
    h.register(recovery_app.EFFECT)
    yield h
    h.close()


def cli(store: str, *args: str, **env: str) -> tuple[int, str, str]:
    proc = hypha(*args, env=clean_env(HYPHA_STORE_URL=store, **env))
    return proc.returncode, proc.stdout, proc.stderr


def test_dlq_list_show_redrive_purge(lib: Hypha, store: str, tmp_path: Path) -> None:
    run = lib.start("park", {"order": 7})
    wait_until(lambda: lib.store.get(run.id)["status"] == "parked", what="parked")
    (record,) = lib.store.dead_letters()
    lib.close()

    code, out, err = cli(store, "dlq", "list", "--app", APP)
    assert code == 0, err
    (line,) = out.splitlines()
    assert line.split()[0] == str(record["id"]) and "retries_exhausted" in line
    assert "order" not in out  # a listing never shows arguments

    code, out, _ = cli(store, "dlq", "list", "--app", APP, "--json")
    assert json.loads(out)["reason"] == "retries_exhausted"

    code, out, _ = cli(store, "dlq", "show", str(record["id"]), "--app", APP)
    assert code == 0 and json.loads(out)["args"][0]["input"] == {"order": 7}

    missing = hypha("dlq", "show", "999", "--app", APP, env=clean_env(HYPHA_STORE_URL=store))
    assert "no dead letter 999" in assert_one_line_error(missing)

    fixed = tmp_path / "fixed"
    fixed.touch()
    code, out, err = cli(store, "dlq", "redrive", str(record["id"]), "--app", APP,
                         HYPHA_TEST_FIXED=str(fixed))
    assert code == 0, err
    assert f"redriven dead letter {record['id']}" in out and f"run {run.id} completed" in out

    again = hypha("dlq", "redrive", str(record["id"]), "--app", APP,
                  env=clean_env(HYPHA_STORE_URL=store))
    assert "already redriven" in assert_one_line_error(again)

    usage = hypha("dlq", "purge", "--app", APP, env=clean_env(HYPHA_STORE_URL=store))
    assert "give dead-letter IDs or --all" in assert_one_line_error(usage, code=2)
    code, out, _ = cli(store, "dlq", "purge", "--all", "--app", APP)
    assert code == 0 and out.strip() == "purged 0 dead letters"  # the redriven one stays


def test_quarantine_list_release_and_fail(lib: Hypha, store: str) -> None:
    first = quarantined(lib)
    code, out, _ = cli(store, "quarantine", "list", "--app", APP)
    assert code == 0 and first in out and "unknown_commit_state" in out
    code, out, _ = cli(store, "status", first, "--app", APP)
    assert "status   quarantined" in out and "reason=unknown_commit_state" in out
    code, out, _ = cli(store, "status", first, "--json", "--app", APP)
    assert json.loads(out)["held"]["execution_id"] == f"{first}.1"
    code, out, err = cli(store, "quarantine", "release", first, "--app", APP)
    assert code == 0, err
    assert f"run {first} completed" in out

    not_held = hypha("quarantine", "fail", first, "--app", APP,
                     env=clean_env(HYPHA_STORE_URL=store))
    assert "not quarantined" in assert_one_line_error(not_held)


def test_quarantine_fail_and_sweep(store: str, lib: Hypha) -> None:
    run_id = quarantined(lib)
    code, out, err = cli(store, "quarantine", "fail", run_id, "--app", APP,
                         "--message", "ops: charged twice")
    assert code == 0 and out.strip() == f"failed {run_id}", err
    code, out, err = cli(store, "status", run_id, "--json", "--app", APP)
    assert json.loads(out)["error"]["reason"] == "quarantined"
    code, out, err = cli(store, "sweep", "--app", APP)
    assert code == 0 and "0 decisions" in err
    assert WAIT


def test_a_sweep_line_names_the_run_or_the_agent() -> None:
    from hypha_celery.cli.recovery import decision_line

    run = decision_line({"run_id": "r1", "action": "redriven", "execution_id": "r1.3",
                         "why": "worker_lost"})
    assert run.split() == ["redriven", "run", "r1", "r1.3", "(worker_lost)"]
    # an agents' sweep decision has no run: it used to raise KeyError('run_id')
    agent = decision_line({"agent": "support", "action": "completion_resent", "ref": "q1"})
    assert agent.split() == ["completion_resent", "agent", "support", "q1"]
    assert decision_line({"agent": "a", "action": "agent_redriven", "why": "owner_lost"}
                         ).split() == ["agent_redriven", "agent", "a", "(owner_lost)"]
