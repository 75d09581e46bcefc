"""CliProcess and the reaper, on the fake CLI: JSONL parsing and its bounds, exit codes,
stderr for operators, killing a whole process group, and no orphan when the worker dies."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hypha_celery.backends import BackendError
from hypha_celery.backends.process import (
    CliCommand,
    CliNotInstalled,
    CliProcess,
    StreamLimits,
    find_executable,
)
from tests.fakes.clis import FAKE_CLI, ROOT, gone, group_alive, kill_leftovers

SECRET = "sk-SENTINEL-process-0123456789"


DEFAULT = StreamLimits()


def run(mode: str, limits: StreamLimits = DEFAULT, grace: float = 0.5,
        **env: str) -> CliProcess:
    base = {"PATH": os.environ["PATH"], "FAKE_CLI_MODE": mode, "API_KEY_FOR_TEST": SECRET}
    command = CliCommand((str(FAKE_CLI),), {**base, **env}, "the prompt", None, (SECRET,))
    return CliProcess("fake", command, limits, kill_grace=grace)


def test_a_turn_reads_json_lines_and_the_prompt_comes_on_stdin() -> None:
    proc = run("argv")
    lines = list(proc.lines())
    assert proc.finish() == 0
    shown = json.loads(lines[-1]["result"])
    assert shown["prompt"] == "the prompt" and shown["argv"] == []
    assert [line["type"] for line in lines] == ["system", "result"]


def test_a_malformed_line_kills_the_cli_and_is_typed() -> None:
    proc = run("malformed")
    seen = []
    with pytest.raises(BackendError) as caught:
        seen.extend(proc.lines())
    assert caught.value.kind == "malformed_stream"
    assert [line["type"] for line in seen] == ["system"]
    assert proc.pid is not None and gone([proc.pid])
    proc.close()


def test_a_line_past_its_bound_is_line_too_long() -> None:
    proc = run("long", StreamLimits(max_line_bytes=1000), FAKE_CLI_BYTES="5000")
    with pytest.raises(BackendError) as caught:
        list(proc.lines())
    assert caught.value.kind == "line_too_long"
    proc.close()


def test_the_turn_is_bounded_in_lines() -> None:
    proc = run("many", StreamLimits(max_lines=5), FAKE_CLI_LINES="50")
    with pytest.raises(BackendError) as caught:
        list(proc.lines())
    assert caught.value.kind == "stream_overflow"
    proc.close()


def test_the_exit_code_and_a_scrubbed_stderr_tail() -> None:
    noise = (f"fatal: bad key {SECRET} Authorization: Bearer abc.def api_key=zzz123 "
             "sk-other-99999999")
    proc = run("exit", FAKE_CLI_CODE="3", FAKE_CLI_STDERR=noise)
    list(proc.lines())
    assert proc.finish() == 3
    tail = proc.stderr_tail()
    assert "fatal: bad key" in tail
    for leak in (SECRET, "abc.def", "zzz123", "sk-other-99999999"):
        assert leak not in tail
    error = proc.error("cli_exit", f"exit code 3 with {SECRET}")
    assert SECRET not in error.message and "fatal: bad key" in error.message
    assert SECRET not in str(error) and SECRET not in repr(error)


def test_a_crash_mid_stream_ends_the_lines_with_the_signal_as_exit_code() -> None:
    proc = run("crash")
    lines = list(proc.lines())
    assert [line["type"] for line in lines] == ["system", "assistant"]
    assert proc.finish() == -signal.SIGKILL


def hanging(mode: str, tmp_path: Path, **more: Any) -> tuple[CliProcess, list[int]]:
    pids_file = tmp_path / "pids"
    proc = run(mode, FAKE_CLI_PIDS=str(pids_file), **more)
    lines = proc.lines()
    next(lines)  # init
    next(lines)  # "working": the grandchild is running by now
    pids = [int(p) for p in pids_file.read_text().split()]
    assert proc.pid is not None and sorted(group_alive(proc.pid)) == sorted(pids)
    return proc, pids


@pytest.mark.parametrize("mode", ["hang", "ignore"])
def test_kill_from_another_thread_kills_the_whole_group(mode: str, tmp_path: Path) -> None:
    proc, pids = hanging(mode, tmp_path)
    started = time.monotonic()
    killers = [threading.Thread(target=proc.kill) for _ in range(3)]
    for killer in killers:
        killer.start()
    for killer in killers:
        killer.join(10)
    took = time.monotonic() - started
    try:
        assert gone(pids, 1.0), "a process of the CLI's group survived kill()"
    finally:
        kill_leftovers(pids)
    assert took < (2.0 if mode == "ignore" else 0.4)  # SIGKILL only after the grace
    with pytest.raises(BackendError) as caught:
        proc.finish()
    assert caught.value.kind == "cancelled"
    proc.kill()  # idempotent, after the end too
    proc.close()


def test_no_line_for_too_long_is_a_timeout(tmp_path: Path) -> None:
    proc = run("hang", StreamLimits(idle_timeout=0.5), FAKE_CLI_PIDS=str(tmp_path / "pids"))
    started = time.monotonic()
    lines = list(proc.lines())
    assert 0.4 < time.monotonic() - started < 5
    assert len(lines) == 2
    with pytest.raises(BackendError) as caught:
        proc.finish()
    assert (caught.value.kind, caught.value.retryable) == ("timeout", True)
    assert gone([int(p) for p in (tmp_path / "pids").read_text().split()])


def test_kill_before_start_means_nothing_runs() -> None:
    proc = run("ok")
    proc.kill()
    with pytest.raises(BackendError) as caught:
        list(proc.lines())
    assert caught.value.kind == "cancelled" and proc.pid is None


def test_a_missing_executable_says_how_to_install_it() -> None:
    with pytest.raises(CliNotInstalled) as caught:
        find_executable("claude_code", "no-such-cli-here", "install it with npm i -g x")
    assert caught.value.kind == "cli_not_installed"
    assert "npm i -g x" in str(caught.value)
    command = CliCommand(("/nonexistent/cli",), {}, "")
    with pytest.raises(CliNotInstalled):
        CliProcess("fake", command).start()


WORKER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from hypha_celery.backends.process import CliCommand, CliProcess
    env = {"PATH": os.environ["PATH"], "FAKE_CLI_MODE": "hang", "FAKE_CLI_PIDS": sys.argv[3]}
    proc = CliProcess("fake", CliCommand((sys.argv[2],), env, "hi"))
    lines = proc.lines()
    next(lines); next(lines)
    print("ready", flush=True)
    time.sleep(300)
""")


def test_a_worker_killed_with_sigkill_leaves_no_orphan(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(ROOT), str(FAKE_CLI),
                               str(pids_file)], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        pids = [int(p) for p in pids_file.read_text().split()]
        assert not gone(pids, 0.2)
        worker.kill()  # SIGKILL: no cleanup of its own runs
        worker.wait(5)
        try:
            assert gone(pids, 5.0), "the CLI's group outlived its SIGKILLed worker"
        finally:
            kill_leftovers(pids)
    finally:
        worker.kill()
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()


FORKING = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from hypha_celery.backends.process import CliCommand, CliProcess

    def hang(pids_file):
        env = {"PATH": os.environ["PATH"], "FAKE_CLI_MODE": "hang", "FAKE_CLI_PIDS": pids_file}
        proc = CliProcess("fake", CliCommand((sys.argv[2],), env, "hi"))
        lines = proc.lines()
        next(lines); next(lines)
        return proc

    parent_cli = hang(sys.argv[3])
    child = os.fork()
    if child == 0:  # a prefork pool process: its own watcher, not the parent's
        child_cli = hang(sys.argv[4])
        print("child-ready", flush=True)
        time.sleep(300)
        os._exit(0)
    print(child, flush=True)
    time.sleep(300)
""")


def test_a_forked_child_does_not_keep_its_parents_clis_alive(tmp_path: Path) -> None:
    first, second = tmp_path / "parent", tmp_path / "child"
    worker = subprocess.Popen([sys.executable, "-c", FORKING, str(ROOT), str(FAKE_CLI),
                               str(first), str(second)], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert worker.stdout is not None
        ready = {worker.stdout.readline().strip() for _ in range(2)}
        child = int(next(line for line in ready if line.isdigit()))
        parent_pids = [int(p) for p in first.read_text().split()]
        child_pids = [int(p) for p in second.read_text().split()]
        worker.kill()  # the parent dies; its forked child lives on
        worker.wait(5)
        try:
            assert gone(parent_pids, 5.0), "the parent's CLI outlived it"
            assert not gone(child_pids, 0.3), "the child's CLI died with the parent"
            os.kill(child, signal.SIGKILL)
            assert gone(child_pids, 5.0), "the child's CLI outlived the child"
        finally:
            kill_leftovers(parent_pids + child_pids)
    finally:
        for pid in (worker.pid, child):
            with contextlib.suppress(ProcessLookupError):
                if pid:
                    os.kill(pid, signal.SIGKILL)
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()
