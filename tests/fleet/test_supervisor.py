"""hypha_celery.fleet: real child processes killed, restarted after their back-off, given
up on past the limit, and (no policy) the first death stops the fleet."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from hypha_celery.errors import SetupError
from hypha_celery.fleet import (
    Child,
    Exited,
    Fleet,
    GaveUp,
    Notice,
    Restarted,
    Restarting,
    RestartPolicy,
    supervise,
)

SLEEPER = Child("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"])
CRASHER = Child("crasher", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"])


def fleet(tmp_path: Path, policy: RestartPolicy | None) -> tuple[Fleet, list[Notice]]:
    notices: list[Notice] = []
    return Fleet(tmp_path, dict(os.environ), notices.append, policy=policy), notices


def until(check: Fleet, done: object, timeout: float = 20) -> bool:
    """``check.check()`` every 20 ms until ``done()`` or it returns False; its last answer."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ok = check.check()
        if not ok or done():  # type: ignore[operator]
            return ok
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_a_killed_child_is_restarted_after_its_backoff(tmp_path: Path) -> None:
    f, notices = fleet(tmp_path, RestartPolicy(limit=3, backoff=0.3))
    try:
        first = f.start(SLEEPER)
        os.kill(first.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        assert until(f, lambda: any(isinstance(n, Restarted) for n in notices))
        waited = time.monotonic() - killed_at
        restarting, restarted = notices
        assert isinstance(restarting, Restarting) and isinstance(restarted, Restarted)
        assert (restarting.pid, restarting.returncode) == (first.proc.pid, -signal.SIGKILL)
        assert (restarting.delay, restarting.number, restarting.limit) == (0.3, 1, 3)
        assert waited >= 0.3
        [now] = f.running
        assert now.proc.pid == restarted.pid != first.proc.pid
        assert psutil.Process(now.proc.pid).is_running() and now.proc.poll() is None
        assert "restarted: pid" in (tmp_path / "sleeper.log").read_text()
    finally:
        assert f.stop(5) == 1


def test_past_the_limit_the_fleet_gives_up_and_backoffs_double(tmp_path: Path) -> None:
    f, notices = fleet(tmp_path, RestartPolicy(limit=2, backoff=0.1, max_backoff=0.15))
    f.start(CRASHER)
    assert until(f, lambda: False) is False  # it gave up
    kinds = [n.kind for n in notices]
    assert kinds == ["restarting", "restarted", "restarting", "restarted", "gave_up"]
    delays = [n.delay for n in notices if isinstance(n, Restarting)]
    assert delays == [0.1, 0.15]  # doubled, at most max_backoff
    gave_up = notices[-1]
    assert isinstance(gave_up, GaveUp) and gave_up.returncode == 3 and gave_up.limit == 2
    assert (tmp_path / "crasher.log").read_text().count("boom") == 3
    assert f.running == [] and f.stop(1) == 0


def test_restarts_older_than_the_window_do_not_count(tmp_path: Path) -> None:
    now = [1000.0]
    notices: list[Notice] = []
    f = Fleet(tmp_path, dict(os.environ), notices.append,
              policy=RestartPolicy(limit=1, window=60, backoff=0), clock=lambda: now[0])
    f.start(CRASHER)
    for i in range(1, 4):  # one death a minute and more: each within its own window
        assert until(f, lambda: [n.kind for n in notices].count("restarted") == i)  # noqa: B023
        now[0] += 61
    assert [n.kind for n in notices] == ["restarting", "restarted"] * 3
    f.stop(1)


def test_without_a_policy_the_first_death_stops_the_fleet(tmp_path: Path) -> None:
    f, notices = fleet(tmp_path, None)
    try:
        f.start(SLEEPER)
        f.start(CRASHER)
        stopping = threading.Event()
        assert supervise([f], stopping, every=0.02) == 1
        [exited] = notices
        assert isinstance(exited, Exited) and exited.child == CRASHER and exited.returncode == 3
    finally:
        assert f.stop(5) == 1  # the sleeper


def test_a_child_that_is_never_restarted_stops_the_fleet(tmp_path: Path) -> None:
    f, notices = fleet(tmp_path, RestartPolicy())
    f.start(Child("redis", CRASHER.argv, restart=False))
    assert until(f, lambda: False) is False
    assert [n.kind for n in notices] == ["exited"]


def test_supervise_returns_0_when_asked_to_stop(tmp_path: Path) -> None:
    f, _ = fleet(tmp_path, RestartPolicy())
    stopping = threading.Event()
    stopping.set()
    assert supervise([f], stopping) == 0


@pytest.mark.parametrize("bad", [dict(limit=-1), dict(window=0), dict(backoff=-1),
                                 dict(backoff=5, max_backoff=1)])
def test_a_bad_policy_is_a_setup_error(bad: dict[str, float]) -> None:
    with pytest.raises(SetupError):
        RestartPolicy(**bad)  # type: ignore[arg-type]
