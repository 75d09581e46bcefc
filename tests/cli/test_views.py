"""``hypha audit`` and ``hypha session`` (click's CliRunner on a group holding the
commands of ``hypha_celery.cli.views``), and ``RunHandle.view()`` / ``.audit()``, against
SQLite stores made by running the demo graph."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import click
import pytest
from click.testing import CliRunner, Result

from hypha_celery import Hypha, RunHandle, RunNotFound, Settings
from hypha_celery.cli.main import HyphaGroup
from hypha_celery.cli.views import COMMANDS
from hypha_celery.demo import demo_graph
from hypha_celery.events import new_view
from hypha_celery.projections import AuditView, SessionView, audit_view, run_view
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore
from tests.cli.conftest import DemoRun

QUESTION = "sk-secret-question-text"
#: A node output of the demo (the ``faq`` lookup's hit) and part of its result.
NODE_OUTPUT = "Duplicate charges are refunded within 5 days."


def group() -> click.Group:
    cli = HyphaGroup("hypha")
    for command in COMMANDS:
        cli.add_command(command)
    return cli


def invoke(*args: str, store_url: str) -> Result:
    return CliRunner().invoke(group(), list(args), catch_exceptions=False,
                              env={"HYPHA_BROKER_URL": None, "HYPHA_STORE_URL": store_url})


def one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hypha: error: ")
    assert "Traceback" not in result.output
    return lines[0]


@dataclass(frozen=True)
class Session:
    store_url: str
    run_ids: list[str]


@pytest.fixture(scope="module")
def session_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """Two demo runs of user ``alice`` in session ``s1`` (the second queued behind the
    first), one of ``bob`` in ``s1``, all completed."""
    url = f"sqlite:///{tmp_path_factory.mktemp('session') / 'hypha.db'}"
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=url, embedded=True))
    try:
        hypha.register(demo_graph())
        runs = [hypha.start("support", {"question": QUESTION}, user_id=user, session_id="s1")
                for user in ("alice", "alice", "bob")]
        for run in runs:
            run.wait(timeout=30)
        yield Session(url, [run.id for run in runs])
    finally:
        hypha.close()


def test_audit_human(demo_run: DemoRun) -> None:
    result = invoke("audit", demo_run.run_id, store_url=demo_run.store_url)
    assert result.exit_code == 0, result.output
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1]
            for line in result.stdout.splitlines() if not line.startswith("  ")}
    assert rows["run"] == demo_run.run_id and rows["graph"] == "support"
    assert rows["status"] == "completed"
    assert rows["path"] == "classify -> lookup -> lookup -> lookup -> answer"
    assert rows["decisions"] == "4" and rows["tools"] == "0" and rows["models"] == "0"
    assert rows["outcome"].startswith("completed at ")
    assert "  step 1  fanout lookup, lookup, lookup -> merge" in result.stdout.splitlines()
    assert NODE_OUTPUT not in result.stdout


def test_audit_json(demo_run: DemoRun) -> None:
    result = invoke("audit", demo_run.run_id, "--json", store_url=demo_run.store_url)
    assert result.exit_code == 0, result.output
    audit = AuditView.model_validate(json.loads(result.stdout))
    assert audit == audit_view(demo_run.events)
    assert audit.outcome is not None and audit.outcome.status == "completed"
    assert NODE_OUTPUT not in result.stdout


def test_audit_of_an_unknown_run_is_one_line(demo_run: DemoRun) -> None:
    line = one_line_error(invoke("audit", "nope", store_url=demo_run.store_url), 1)
    assert "no run 'nope'" in line


def test_session_human(session_runs: Session) -> None:
    first, second, _ = session_runs.run_ids
    result = invoke("session", "alice", "s1", store_url=session_runs.store_url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["session", "alice", "/", "s1"]
    assert lines[1].split() == ["status", "idle"]
    assert lines[2].split() == ["runs", "2", "(completed", "2)"]
    assert [line.split()[:2] for line in lines[5:]] == [[first, "completed"],
                                                        [second, "completed"]]
    assert QUESTION not in result.output and NODE_OUTPUT not in result.output


def test_session_json_and_an_active_session(session_runs: Session) -> None:
    result = invoke("session", "alice", "s1", "--json", store_url=session_runs.store_url)
    view = SessionView.model_validate(json.loads(result.stdout))
    assert [r.run_id for r in view.runs] == session_runs.run_ids[:2]
    assert view.counts.completed == 2 and view.status == "idle"

    store = EventStore(session_runs.store_url)
    try:  # a run created and not started yet makes the session active
        run_id = uuid.uuid4().hex
        with store.transaction() as tx:
            tx.create(new_view(run_id))
            lifecycle.record(tx, run_id, "run.created", {"graph_id": "support",
                                                         "user_id": "alice",
                                                         "session_id": "s2"})
    finally:
        store.dispose()
    result = invoke("session", "alice", "s2", "--json", store_url=session_runs.store_url)
    view = SessionView.model_validate(json.loads(result.stdout))
    assert view.status == "active" and view.counts.queued == 1


def test_a_session_without_runs(session_runs: Session) -> None:
    result = invoke("session", "carol", "s1", store_url=session_runs.store_url)
    assert result.exit_code == 0
    assert result.stderr.strip() == "no runs of user 'carol' in session 's1'"
    assert result.stdout.splitlines()[1].split() == ["status", "idle"]


def test_session_needs_both_ids(session_runs: Session) -> None:
    line = one_line_error(invoke("session", "alice", store_url=session_runs.store_url), 2)
    assert "SESSION_ID" in line


def test_run_handle_view_and_audit(demo_run: DemoRun) -> None:
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=demo_run.store_url, embedded=True))
    try:
        handle = hypha.get_run(demo_run.run_id)
        view = handle.view()
        assert view == run_view(demo_run.events)
        assert view.status == handle.status().status == "completed"
        assert view.output == demo_run.result
        assert view.steps == handle.status().step == 3
        assert handle.audit() == audit_view(demo_run.events)
        for method in (RunHandle(hypha, "nope").view, RunHandle(hypha, "nope").audit):
            with pytest.raises(RunNotFound):
                method()
    finally:
        hypha.close()
