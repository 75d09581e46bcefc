"""``hypha worker`` and ``hypha beat``: an option neither hypha nor Celery knows is one line
and exit 2 before anything else, ``--help`` included; ``--dry-run`` (``--check``) loads
the app and prints the Celery command line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from hypha_celery.cli.passthrough import first_unknown
from tests.cli.helpers import module_restored
from tests.cli.test_commands import invoke, one_line_error

APP = "examples.support:hypha"
BROKER = "redis://127.0.0.1:1/0"  # never reached: nothing here connects


@pytest.fixture(autouse=True)
def _fresh_app_module() -> Iterator[None]:
    """The app is imported here with a broker URL: later tests import their own."""
    with module_restored("examples.support"):
        yield


@pytest.mark.parametrize(("args", "typo", "meant"), [
    (("worker", "--app", APP, "--profle", "cpu", "--help"), "--profle", "--profile"),
    (("worker", "--app", APP, "--profile", "cpu", "--hostnme=w@%h"), "--hostnme",
     "--hostname"),
    (("beat", "--app", APP, "--schedul", "x", "--help"), "--schedul", "--schedule"),
    (("beat", "--app", APP, "--max-intreval=5", "--dry-run"), "--max-intreval",
     "--max-interval"),
])
def test_a_typo_is_one_line_exit_2_even_with_help(args: tuple[str, ...], typo: str,
                                                  meant: str) -> None:
    line = one_line_error(invoke(*args, HYPHA_BROKER_URL=BROKER), code=2)
    assert f"No such option '{typo}'" in line and meant in line, line


def test_help_with_valid_options_still_shows_the_help() -> None:
    result = invoke("worker", "--app", APP, "--profile", "cpu", "-c", "2", "--without-gossip",
                    "--help", HYPHA_BROKER_URL=BROKER)
    assert result.exit_code == 0, result.output
    assert "--dry-run" in result.stdout and "--profile" in result.stdout


def test_worker_dry_run_prints_the_celery_command_line() -> None:
    result = invoke("worker", "--app", APP, "--profile", "io", "-c", "8", "--hostname",
                    "io-1@%h", "--without-gossip", "--dry-run", HYPHA_BROKER_URL=BROKER)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "celery worker --pool=gevent --queues=hypha.agents,hypha.io --task-events "
        "--loglevel=INFO --concurrency=8 --hostname io-1@%h --without-gossip"]
    check = invoke("worker", "--app", APP, "--profile", "nope", "--check",
                   HYPHA_BROKER_URL=BROKER)
    assert "--profile" in one_line_error(check, code=1)  # the profile is checked too


def test_beat_dry_run_loads_the_app_and_prints_the_command_line() -> None:
    result = invoke("beat", "--app", APP, "--schedule=.hypha/s", "-l", "debug", "--check",
                    HYPHA_BROKER_URL=BROKER)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["celery beat --loglevel=DEBUG --schedule=.hypha/s"]
    missing = invoke("beat", "--app", "no_such_module:hypha", "--dry-run",
                     HYPHA_BROKER_URL=BROKER)
    assert "no_such_module" in one_line_error(missing, code=1)


def test_first_unknown_reads_values_as_values() -> None:
    known = {"--hostname": True, "-n": True, "-B": False, "--concurrency": True}
    assert first_unknown(["--hostname", "--x", "-B"], known) is None  # a value, oddly spelt
    assert first_unknown(["-n", "a@b", "-Bx", "--concurrency=-1"], known) is None
    assert first_unknown(["--concurrency", "-1", "--", "--anything"], known) is None
    assert first_unknown(["--hostname=a", "--hostnme", "b"], known) == "--hostnme"
    assert first_unknown(["-B", "-z"], known) == "-z"


@pytest.mark.parametrize(("args", "tuned", "switch"), [
    (("--profile", "io", "--pool", "threads"), True, True),
    (("--profile", "io", "--pool", "prefork"), False, False),
    (("--profile", "cpu"), False, False),
])
def test_the_io_profile_tunes_the_interpreter_before_the_worker_starts(
        monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], tuned: bool,
        switch: bool) -> None:
    from celery import Celery

    seen: list[tuple[tuple[int, ...], int, float]] = []
    monkeypatch.setattr(Celery, "worker_main", lambda self, argv: seen.append(_interpreter()))
    with _restored() as before:
        result = invoke("worker", "--app", APP, *args, HYPHA_BROKER_URL=BROKER)
        assert result.exit_code == 0, result.output
    _assert_tuned(seen, before, tuned, switch)


def test_a_gevent_worker_is_this_process_patched_anew_then_tuned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--profile io`` (gevent's pool): the CLI replaces its process by one that patches
    first (``GREEN_BOOT``) and is told the app, the tuning and the worker's argv; that
    process tunes the collector (not the switch interval: no threads) and starts it."""
    import sys

    from celery import Celery

    from hypha_celery.cli import worker as cli_worker

    execs: list[list[str]] = []
    monkeypatch.setattr(cli_worker, "replace_process", execs.append)
    result = invoke("worker", "--app", APP, "--profile", "io", "-c", "7", "--without-gossip",
                    HYPHA_BROKER_URL=BROKER)
    assert result.exit_code == 0, result.output
    [argv] = execs
    assert argv[:4] == [sys.executable, "-c", cli_worker.GREEN_BOOT, APP]
    assert argv[5:] == ["worker", "--pool=gevent", "--queues=hypha.agents,hypha.io",
                        "--task-events", "--loglevel=INFO", "--concurrency=7",
                        "--without-gossip"]
    seen: list[tuple[tuple[int, ...], int, float]] = []
    started: list[list[str]] = []

    def worker_main(self: Celery, told: list[str]) -> None:
        seen.append(_interpreter())
        started.append(told)

    monkeypatch.setattr(Celery, "worker_main", worker_main)
    monkeypatch.setattr(sys, "argv", ["-c", *argv[3:]])
    monkeypatch.setenv("HYPHA_BROKER_URL", BROKER)
    with _restored() as before:
        cli_worker.green_main()
    assert started == [argv[5:]]
    _assert_tuned(seen, before, True, False)


def _interpreter() -> tuple[tuple[int, ...], int, float]:
    import gc
    import sys

    return gc.get_threshold(), gc.get_freeze_count(), sys.getswitchinterval()


Interpreter = tuple[tuple[int, ...], float]


@contextmanager
def _restored() -> Iterator[Interpreter]:
    """The collector's thresholds and frozen objects and the switch interval as they were
    (yields them)."""
    import gc
    import sys

    before = (gc.get_threshold(), sys.getswitchinterval())
    try:
        yield before
    finally:
        gc.unfreeze()
        gc.set_threshold(*before[0])
        sys.setswitchinterval(before[1])


def _assert_tuned(seen: list[tuple[tuple[int, ...], int, float]], before: Interpreter,
                  tuned: bool, switched: bool) -> None:
    from hypha_celery.cli.worker import IO_GC_THRESHOLD, IO_SWITCH_INTERVAL

    threshold, before_switch = before
    [(now, frozen, switch)] = seen
    assert (now == IO_GC_THRESHOLD and frozen > 0) is tuned
    assert (now == threshold) is not tuned
    assert (abs(switch - IO_SWITCH_INTERVAL) < 1e-6) is switched
    assert (abs(switch - before_switch) < 1e-6) is not switched
