"""``hypha agents ...`` against a real SQLite store. The test starts agents through the
Python API; the CLI runs embedded, so each command's own process serves the turns it
causes (and waits for them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hypha_celery import Hypha
from hypha_celery.backends import BackendEvent, MockBackend
from tests.cli import agents_app
from tests.cli.helpers import assert_one_line_error, clean_env, hypha
from tests.runtime.support import WAIT, embedded, wait_until

APP = "tests.cli.agents_app:hypha"


def result(text: str) -> list[BackendEvent]:
    return [BackendEvent.new("result", {"text": text})]


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hypha.db'}"


@pytest.fixture
def lib(store: str) -> Iterator[Hypha]:
    h = embedded(store)
    yield h
    h.close()


def cli(store: str, *args: str) -> tuple[int, str, str]:
    proc = hypha("agents", *args, "--app", APP, env=clean_env(HYPHA_STORE_URL=store))
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def cli_error(store: str, *args: str, code: int = 1) -> str:
    proc = hypha("agents", *args, "--app", APP, env=clean_env(HYPHA_STORE_URL=store))
    return assert_one_line_error(proc, code=code)


def test_list_status_ask_tell_poll_stop(lib: Hypha, store: str) -> None:
    lib.agents.start(agents_app.Echo, name="e1", backend=MockBackend,
                     scripts=[result("hi"), result("as json"), result("told"),
                              MockBackend.error("boom")])

    code, out, err = cli(store, "list")
    assert (code, out.split()) == (0, ["e1", "idle", "tests.cli.agents_app:Echo"]), err
    code, out, _ = cli(store, "list", "--json")
    row = json.loads(out)
    assert (row["name"], row["phase"], row["kind"]) == ("e1", "idle", "tests.cli.agents_app:Echo")

    code, out, err = cli(store, "ask", "e1", "hello", "--timeout", "30")
    assert (code, out) == (0, "hi\n"), err
    code, out, _ = cli(store, "ask", "e1", "again", "--json")
    response = json.loads(out)
    assert code == 0 and response["text"] == "as json" and response["prompt"] == "again"
    assert response["terminal"]["kind"] == "result"

    code, out, err = cli(store, "tell", "e1", "note this")
    assert code == 0, err
    ref = out.strip()
    assert len(out.splitlines()) == 1 and ref
    code, out, _ = cli(store, "poll", "e1", ref)
    assert (code, out) == (0, "completed\ntold\n")
    code, out, _ = cli(store, "poll", "e1", ref, "--json")
    polled = json.loads(out)
    assert polled["status"] == "completed" and polled["response"]["text"] == "told"

    failed = cli_error(store, "ask", "e1", "fail please")
    assert "failed: boom" in failed

    code, out, _ = cli(store, "poll", "e1", "no-such-ref")
    assert (code, out) == (1, "error not_found\n")
    code, out, _ = cli(store, "poll", "e1", "no-such-ref", "--json")
    assert code == 1 and json.loads(out)["reason"] == "not_found"

    code, out, err = cli(store, "status", "e1")
    assert code == 0, err
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["agent"] == "e1" and lines["phase"] == "idle" and lines["current"] == "-"
    code, out, _ = cli(store, "status", "e1", "--json")
    snapshot = json.loads(out)
    assert snapshot["name"] == "e1" and snapshot["phase"] == "idle"
    assert snapshot["pending_prompts"] == 0 and snapshot["current_request"] is None
    for args in (("status", "e1"), ("status", "e1", "--json"), ("list", "--json")):
        _, out, _ = cli(store, *args)
        assert agents_app.SECRET not in out and "seen" not in out and "hello" not in out
    assert lib.agents.status("e1").agent_state["seen"] == ["hi", "as json", "told"]

    code, out, _ = cli(store, "stop", "e1")
    assert (code, out) == (0, "stopped e1\n")
    assert lib.agents.whereis("e1") is None
    code, out, err = cli(store, "list")
    assert (code, out, err) == (0, "", "no agents\n")


def test_halt_queues_tells_until_resume(lib: Hypha, store: str) -> None:
    lib.agents.start(agents_app.Echo, name="h1", backend=MockBackend,
                     scripts=[result("later")], max_pending_prompts=1)
    code, out, err = cli(store, "halt", "h1")
    assert (code, out) == (0, "halted h1\n"), err
    _, out, _ = cli(store, "status", "h1", "--json")
    assert json.loads(out)["halted"] is True
    _, out, _ = cli(store, "list")
    assert out.split()[:2] == ["h1", "halted"]

    code, out, err = cli(store, "tell", "h1", "queued")
    assert code == 0 and "note" not in err, err  # halted: nothing to wait for
    ref = out.strip()
    assert cli(store, "poll", "h1", ref)[:2] == (0, "pending\n")
    _, out, _ = cli(store, "status", "h1")
    assert "halted" in out and "1 prompts" in out

    overloaded = cli_error(store, "tell", "h1", "one too many")
    assert "overloaded: prompts queue full" in overloaded

    code, out, err = cli(store, "resume", "h1")
    assert (code, out) == (0, "resumed h1\n"), err
    assert cli(store, "poll", "h1", ref)[:2] == (0, "completed\nlater\n")


def test_drain_refuses_input_and_times_out(lib: Hypha, store: str) -> None:
    """The test process serves a gated turn; the CLI drains around it."""
    lib.agents.start(agents_app.Echo, name="d1", backend=MockBackend,
                     scripts=[MockBackend.gate("d1-turn", result("gated"), timeout=WAIT * 2)])
    ref = lib.agents.tell("d1", "slow")
    assert MockBackend.wait_blocked("d1-turn", timeout=WAIT) is not None

    timed_out = cli_error(store, "ask", "d1", "quick?", "--timeout", "0.3")
    assert "did not end within 0.3s" in timed_out
    drain = cli_error(store, "drain", "d1", "--timeout", "0.3")
    assert "the drain goes on" in drain
    assert "is draining" in cli_error(store, "tell", "d1", "more")
    assert "is draining" in cli_error(store, "ask", "d1", "more")
    code, out, _ = cli(store, "halt", "d1")
    assert (code, out) == (0, "agent d1 is draining; halt ignored\n")

    MockBackend.release("d1-turn")
    wait_until(lambda: lib.agents.whereis("d1") is None, what="d1 drained")
    assert "no agent named 'd1'" in cli_error(store, "poll", "d1", ref)


def test_drain_idle_agent(lib: Hypha, store: str) -> None:
    lib.agents.start(agents_app.Echo, name="d2", backend=MockBackend, scripts=[])
    code, out, err = cli(store, "drain", "d2", "--timeout", "30")
    assert (code, out) == (0, "drained d2\n"), err
    assert lib.agents.whereis("d2") is None


@pytest.mark.parametrize("args", [
    ("status", "ghost"), ("status", "ghost", "--json"), ("ask", "ghost", "hi"),
    ("ask", "ghost", "hi", "--json"), ("tell", "ghost", "hi"), ("poll", "ghost", "ref"),
    ("halt", "ghost"), ("resume", "ghost"), ("drain", "ghost"), ("stop", "ghost"),
])
def test_unknown_agent_is_one_line(store: str, args: tuple[str, ...]) -> None:
    line = cli_error(store, *args)
    assert line == "hypha: error: no agent named 'ghost'"


def test_usage_errors(store: str) -> None:
    assert "Missing argument 'TEXT'" in cli_error(store, "ask", "e1", code=2)
    assert "--timeout" in cli_error(store, "ask", "e1", "hi", "--timeout", "0", code=2)
    assert "No such command 'nope'" in cli_error(store, "nope", code=2)
