"""``hypha --as-user USER``: every command reads and acts as that user only; what another
user owns fails exactly as what does not exist (one line, exit 1, the id as given)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hypha_celery import Hypha, Settings
from hypha_celery.demo import GRAPH_ID, QUESTION, demo_graph
from hypha_celery.store import EventStore
from tests.cli.test_commands import invoke, one_line_error

GHOST = "0" * 32


@dataclass(frozen=True)
class Owned:
    url: str
    run_id: str
    letter: int


@pytest.fixture(scope="module")
def owned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Owned]:
    """A demo run of user ``alice`` (session ``s1``) with a dead letter."""
    url = f"sqlite:///{tmp_path_factory.mktemp('scoped') / 'hypha.db'}"
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=url, embedded=True))
    try:
        hypha.register(demo_graph())
        run = hypha.as_user("alice").start(GRAPH_ID, {"question": QUESTION}, session_id="s1")
        run.wait(30)
        letter = hypha.store.add_dead_letter({
            "run_id": run.id, "execution_id": None, "task": "hypha.node.x", "queue": None,
            "args": [], "reason": "malformed", "error_class": "permanent",
            "error": {"message": "x"}, "attempts": 1, "status": "open",
            "created_at": time.time()})
        yield Owned(url, run.id, letter)
    finally:
        hypha.close()


def as_user(user: str, *args: str, url: str) -> tuple[int, str, str]:
    result = invoke("--as-user", user, *args, store_url=url)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("command", [
    ("status", "{run}"), ("events", "{run}"), ("audit", "{run}"), ("cancel", "{run}"),
    ("export", "{run}"), ("review", "approve", "{run}"), ("review", "reject", "{run}",
                                                         "--reason", "no"),
    ("quarantine", "release", "{run}", "--app", "examples.support:hypha"),
    ("quarantine", "fail", "{run}", "--app", "examples.support:hypha"),
])
def test_another_users_run_is_a_run_that_does_not_exist(owned: Owned,
                                                         command: tuple[str, ...]) -> None:
    theirs = invoke("--as-user", "bob", *[a.format(run=owned.run_id) for a in command],
                    store_url=owned.url)
    nobody = invoke("--as-user", "bob", *[a.format(run=GHOST) for a in command],
                    store_url=owned.url)
    assert one_line_error(theirs, 1).replace(owned.run_id, "ID") == \
        one_line_error(nobody, 1).replace(GHOST, "ID")
    assert "alice" not in theirs.stderr


def test_the_owner_reads_its_run(owned: Owned) -> None:
    code, out, _ = as_user("alice", "status", owned.run_id, url=owned.url)
    assert code == 0 and "completed" in out
    code, out, err = as_user("alice", "export", owned.run_id, url=owned.url)
    assert code == 0 and owned.run_id in out, err


def test_listings_hold_only_the_users_own(owned: Owned) -> None:
    assert str(owned.letter) in as_user("alice", "dlq", "list", url=owned.url)[1]
    code, out, _ = as_user("bob", "dlq", "list", url=owned.url)
    assert code == 0 and str(owned.run_id) not in out
    code, out, err = as_user("bob", "export", url=owned.url)
    assert code == 0 and out == "" and "exported 0 events of 0 runs" in err
    theirs = invoke("--as-user", "bob", "dlq", "show", str(owned.letter), store_url=owned.url)
    nobody = invoke("--as-user", "bob", "dlq", "show", "999999", store_url=owned.url)
    assert one_line_error(theirs, 1).replace(str(owned.letter), "N") == \
        one_line_error(nobody, 1).replace("999999", "N")
    theirs = invoke("--as-user", "bob", "dlq", "redrive", str(owned.letter), "--app",
                    "examples.support:hypha", store_url=owned.url)
    assert one_line_error(theirs, 1) == f"hypha: error: no dead letter {owned.letter}"
    theirs = invoke("--as-user", "bob", "session", "alice", "s1", store_url=owned.url)
    nobody = invoke("--as-user", "bob", "session", "nobody", "s1", store_url=owned.url)
    assert (theirs.exit_code, theirs.stdout) == (nobody.exit_code, nobody.stdout.replace(
        "nobody", "alice"))


def test_operator_commands_refuse_a_user(owned: Owned, tmp_path: Path) -> None:
    export = tmp_path / "runs.jsonl"
    assert invoke("export", "-o", str(export), store_url=owned.url).exit_code == 0
    line = one_line_error(invoke("--as-user", "alice", "import", str(export),
                                 store_url=owned.url), 1)
    assert "import acts on the whole deployment" in line
    line = one_line_error(invoke("--as-user", "alice", "sweep", "--app", "examples.support:hypha",
                                 store_url=owned.url), 1)
    assert "needs an admin principal" in line
    line = one_line_error(invoke("--as-user", "alice", "worker", "--app", "x:y",
                                 store_url=owned.url), 1)
    assert "a worker acts on the whole deployment" in line
    assert len(EventStore(owned.url).dead_letters()) == 1  # nothing changed


def test_a_bad_user_id_is_one_line(owned: Owned) -> None:
    line = one_line_error(invoke("--as-user", "a/b", "status", owned.run_id,
                                 store_url=owned.url), 1)
    assert "principal id" in line


def test_the_user_comes_from_the_environment_too(owned: Owned) -> None:
    result = invoke("status", owned.run_id, store_url=owned.url, HYPHA_AS_USER="bob")
    assert one_line_error(result, 1) == f"hypha: error: no run {owned.run_id!r} in the " \
        "event store"
