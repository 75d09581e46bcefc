"""``hypha up``: the topology as local processes (dry runs, and one real run with Ctrl-C)."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests
from click.testing import CliRunner

from hypha_celery.cli.main import cli
from tests.cli.helpers import HYPHA, ROOT, assert_one_line_error, clean_env, hypha
from tests.services import free_port

APP = "examples.support:hypha"
CONSOLE = f"hypha console --app {APP} --host 127.0.0.1"


class Output:
    """``hypha up``'s output, read as it comes (a thread drains the pipe)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, proc: subprocess.Popen[str],
                 timeout: float = 120) -> re.Match[str]:
        end = time.monotonic() + timeout
        while True:
            for line in list(self.lines):
                if found := re.search(pattern, line):
                    return found
            assert proc.poll() is None or self._thread.is_alive(), self.text()
            assert time.monotonic() < end, f"no {pattern!r} in:\n{self.text()}"
            time.sleep(0.1)

    def join(self, timeout: float) -> str:
        self._thread.join(timeout)
        return self.text()


Up = tuple[subprocess.Popen[str], dict[str, str], Output, int]


def dry(*args: str, env: dict[str, str] | None = None) -> list[str]:
    result = CliRunner().invoke(cli, ["up", "--app", APP, "--dry-run", *args],
                                env=env or {"HYPHA_BROKER_URL": "redis://127.0.0.1:1/0",
                                            "HYPHA_STORE_URL": "sqlite:///x.db"})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_dry_run_without_workers_dir_runs_cpu_io_beat_console(in_tmp: Path) -> None:
    assert dry("--no-flower") == [
        f"hypha worker --app {APP} --profile cpu --hostname=cpu-1@%h",
        f"hypha worker --app {APP} --profile io --hostname=io-1@%h",
        f"hypha beat --app {APP} --schedule=.hypha/celerybeat-schedule",
        f"{CONSOLE} --port=8765"]


def test_dry_run_console_port_and_no_console(in_tmp: Path) -> None:
    result = CliRunner().invoke(cli, ["up", "--app", APP, "--dry-run", "--no-beat",
                                      "--no-flower", "--workers", "io=1", "--console-port",
                                      "9001"],
                                env={"HYPHA_BROKER_URL": "redis://127.0.0.1:1/0",
                                     "HYPHA_STORE_URL": "sqlite:///x.db",
                                     "HYPHA_CONSOLE_TOKENS": "", "HYPHA_CONSOLE_TOKENS_FILE": ""})
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == f"{CONSOLE} --port=9001"
    assert "console: http://127.0.0.1:9001 (a sign-in link" in result.stderr
    assert "token=" not in result.output and "HYPHA_CONSOLE" not in result.output
    assert not any("console" in line for line in dry("--no-console", "--no-flower"))


def test_the_console_gets_its_own_token_unless_the_environment_has_tokens(
        in_tmp: Path) -> None:
    from hypha_celery.cli.up import plan

    def console_of(env: dict[str, str]) -> tuple[dict[str, str], str | None, list[str]]:
        p = plan(APP, [("io", 1)], beat=False, flower=False, flower_port=5555,
                 redis_port=6379, concurrency=None, logs=in_tmp, console=True,
                 console_port=8766, env={"HYPHA_BROKER_URL": "redis://127.0.0.1:1/0", **env})
        [child] = [c for c in p.children if c.name == "console"]
        assert p.console is not None and "HYPHA_CONSOLE" not in str(p.env)
        assert p.console.token is None or p.console.token not in repr(child) + repr(p)
        return dict(child.env), p.console.token, p.notes

    child_env, token, _ = console_of({})
    assert token is not None and len(token) >= 16
    assert child_env == {"HYPHA_CONSOLE_TOKENS": f"admin:operator={token}"}
    for name in ("HYPHA_CONSOLE_TOKENS", "HYPHA_CONSOLE_TOKENS_FILE"):
        child_env, token, notes = console_of({name: "set"})
        assert child_env == {} and token is None
        assert any("tokens: HYPHA_CONSOLE_TOKENS" in n for n in notes)


def test_dry_run_defaults_to_one_worker_per_profile_file(in_tmp: Path) -> None:
    (in_tmp / "workers").mkdir()
    for name in ("llm", "coordinator", "__init__"):
        (in_tmp / "workers" / f"{name}.py").write_text("queues = ['hypha.io']\n")
    lines = dry("--no-beat", "--flower", "--flower-port", "5566", "--no-console")
    assert lines == [
        f"hypha worker --app {APP} --profile workers/coordinator.py "
        "--hostname=coordinator-1@%h",
        f"hypha worker --app {APP} --profile workers/llm.py --hostname=llm-1@%h",
        "celery -A examples.support flower --port=5566 --address=127.0.0.1"]


def test_dry_run_counts_names_and_concurrency(in_tmp: Path) -> None:
    (in_tmp / "workers").mkdir()
    (in_tmp / "workers" / "llm.py").write_text("queues = ['hypha.io']\n")
    lines = dry("--workers", "llm=2", "--workers", "cpu=1", "-c", "3", "--no-beat",
                "--no-flower", "--no-console")
    assert lines == [
        f"hypha worker --app {APP} --profile workers/llm.py --hostname=llm-1@%h "
        "--concurrency=3",
        f"hypha worker --app {APP} --profile workers/llm.py --hostname=llm-2@%h "
        "--concurrency=3",
        f"hypha worker --app {APP} --profile cpu --hostname=cpu-1@%h --concurrency=3"]


def test_dry_run_without_a_store_or_broker_sets_them_for_the_children(in_tmp: Path) -> None:
    port = free_port()  # nothing listens there
    lines = CliRunner().invoke(cli, ["up", "--app", APP, "--dry-run", "--no-beat",
                                     "--no-flower", "--no-console", "--redis-port", str(port)],
                               env={"HYPHA_BROKER_URL": "", "HYPHA_STORE_URL": "",
                                    "PATH": os.environ["PATH"]})
    assert lines.exit_code in (0, 1), lines.output
    db = in_tmp / ".hypha" / "hypha.db"
    if lines.exit_code == 1:  # no redis-server installed: one error naming the way out
        assert "HYPHA_BROKER_URL" in lines.output
        return
    out = lines.stdout.splitlines()
    assert out[:4] == [f"export HYPHA_BROKER_URL=redis://127.0.0.1:{port}/0",
                       f"export HYPHA_RESULT_BACKEND=redis://127.0.0.1:{port}/1",
                       f"export HYPHA_STORE_URL=sqlite:///{db}",
                       f"redis-server --port {port} --bind 127.0.0.1 --save '' "
                       "--appendonly no"]
    assert "store: SQLite .hypha/hypha.db (HYPHA_STORE_URL unset)" in lines.stderr


@pytest.mark.parametrize("value", ["cpu", "cpu=0", "cpu=x", "=1", "nope=1",
                                   "missing/file.py=1"])
def test_a_bad_workers_value_is_one_line_exit_2(value: str, tmp_path: Path) -> None:
    proc = hypha("up", "--app", APP, "--workers", value, "--dry-run", cwd=tmp_path,
                 env=clean_env(HYPHA_BROKER_URL="redis://127.0.0.1:1/0"))
    assert "--workers" in assert_one_line_error(proc, code=2)


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_a_taken_console_port_is_one_line_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = hypha("up", "--app", APP, "--workers", "io=1", "--no-beat", "--no-flower",
                     "--console-port", str(port), cwd=tmp_path,
                     env=clean_env(HYPHA_BROKER_URL="redis://127.0.0.1:1/0",
                                   HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'h.db'}"))
    assert "--console-port" in assert_one_line_error(proc, code=1)
    assert not (tmp_path / ".hypha" / "logs").exists()  # nothing was started


@pytest.fixture
def up_process(redis_url: str, tmp_path: Path) -> Iterator[Up]:
    env = clean_env(HYPHA_BROKER_URL=redis_url, HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'h.db'}",
                    PYTHONPATH=str(ROOT), HYPHA_SWEEP_INTERVAL="1")
    console_port = free_port()
    proc = subprocess.Popen([HYPHA, "up", "--app", APP, "--workers", "cpu=1", "--workers",
                             "io=1", "-c", "2", "--no-flower", "--grace", "20",
                             "--console-port", str(console_port),
                             "--logs", str(tmp_path / "logs")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        yield proc, env, Output(proc), console_port
    finally:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
        proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()


def _ping(env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run([str(Path(HYPHA).with_name("python")), "-m", "celery", "-A",
                           "examples.support", "inspect", "ping", "--timeout", "2"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    return done.stdout


def test_up_runs_workers_beat_console_then_ctrl_c_stops_them_all(
        up_process: Up, tmp_path: Path) -> None:
    proc, env, output, console_port = up_process
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, output.text()
        answers = _ping(env, tmp_path)
        if "cpu-1@" in answers and "io-1@" in answers:
            break
        assert time.monotonic() < deadline, answers
        time.sleep(1)
    ran = hypha("run", "support", "--app", APP, "--input", '{"question": "a refund?"}',
                "--wait", "--timeout", "60", env=env, cwd=tmp_path, timeout=90)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "billing: " in ran.stdout
    run_id = re.search(r"[0-9a-f]{32}|[0-9a-f-]{36}", ran.stdout + ran.stderr)
    assert run_id, ran.stdout + ran.stderr

    # the console: the sign-in link hypha up printed once it listened
    base = f"http://127.0.0.1:{console_port}"
    link = output.wait_for(re.escape(f"console: {base}/login?token=") + r"(\S+)$", proc)
    token = link.group(1)
    assert requests.get(f"{base}/healthz", timeout=10).text.strip() == "ok"
    anonymous = requests.get(f"{base}/runs", timeout=10, allow_redirects=False)
    assert anonymous.status_code in (303, 401), anonymous.status_code  # not signed in
    with requests.Session() as signed_in:
        page = signed_in.get(f"{base}/login?token={token}", timeout=30)
        assert page.status_code == 200 and page.url == f"{base}/", page.url  # the first page
        page = signed_in.get(f"{base}/runs", timeout=30)
        assert run_id.group(0) in page.text  # the run just made, on the runs page
    pids = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    assert len(pids) >= 4  # two workers (and their pools), beat, the console

    proc.send_signal(signal.SIGINT)
    proc.wait(90)
    out = output.join(30)
    assert proc.returncode == 0, out
    for name in ("worker-cpu-1", "worker-io-1", "beat", "console"):
        assert name in out
        log = (tmp_path / "logs" / f"{name}.log").read_text()
        assert log and token not in log
    assert "stopped 4 processes" in out
    end = time.monotonic() + 15
    while not all(_gone(pid) for pid in pids) and time.monotonic() < end:
        time.sleep(0.1)
    assert [pid for pid in pids if not _gone(pid)] == []


def test_with_exit_on_failure_a_child_dying_stops_the_rest_and_exits_1(
        redis_url: str, tmp_path: Path) -> None:
    env = clean_env(HYPHA_BROKER_URL=redis_url, HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'h.db'}",
                    PYTHONPATH=str(ROOT))
    proc = hypha("up", "--app", "no_such_module:hypha", "--workers", "io=1", "--no-flower",
                 "--no-console", "--grace", "5", "--logs", str(tmp_path / "logs"),
                 "--exit-on-failure", cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "exited with code" in proc.stderr and "restart" not in proc.stderr
    assert "no_such_module" in proc.stderr  # the dead child's log tail


def test_a_child_that_keeps_dying_is_restarted_up_to_the_limit_then_all_stop(
        redis_url: str, tmp_path: Path) -> None:
    env = clean_env(HYPHA_BROKER_URL=redis_url, HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'h.db'}",
                    PYTHONPATH=str(ROOT))
    proc = hypha("up", "--app", "no_such_module:hypha", "--workers", "io=1", "--no-beat",
                 "--no-flower", "--no-console", "--grace", "5", "--logs",
                 str(tmp_path / "logs"), "--max-restarts", "2", "--restart-backoff", "0.1",
                 cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    restarting = [line for line in lines if "restarting it in" in line]
    assert [re.sub(r"pid \d+", "pid N", line) for line in restarting] == [
        "hypha up: worker-io-1 (pid N) exited with code 1; restarting it in 0.1 s "
        "(restart 1 of at most 2 within 10 min)",
        "hypha up: worker-io-1 (pid N) exited with code 1; restarting it in 0.2 s "
        "(restart 2 of at most 2 within 10 min)"]
    assert len([line for line in lines if re.fullmatch(
        r"hypha up: worker-io-1 restarted \(pid \d+\)", line)]) == 2
    assert any("exited with code 1 after 2 restarts within 10 min: not restarted" in line
               for line in lines), proc.stderr
    assert "no_such_module" in proc.stderr and "stopping the rest" in proc.stderr
    log = (tmp_path / "logs" / "worker-io-1.log").read_text()
    assert log.count("--- restarted: pid ") == 2


def test_dry_run_gives_each_worker_its_own_metrics_port(in_tmp: Path) -> None:
    assert dry("--metrics-port", "9464", "--workers", "cpu=2", "--workers", "io=1",
               "--no-flower", "--console-port", "8765") == [
        f"HYPHA_METRICS_PORT=9464 hypha worker --app {APP} --profile cpu --hostname=cpu-1@%h",
        f"HYPHA_METRICS_PORT=9465 hypha worker --app {APP} --profile cpu --hostname=cpu-2@%h",
        f"HYPHA_METRICS_PORT=9466 hypha worker --app {APP} --profile io --hostname=io-1@%h",
        f"HYPHA_METRICS_PORT='' hypha beat --app {APP} --schedule=.hypha/celerybeat-schedule",
        f"HYPHA_METRICS_PORT='' {CONSOLE} --port=8765"]
    result = CliRunner().invoke(cli, ["up", "--app", APP, "--dry-run", "--no-beat",
                                      "--no-flower", "--no-console", "--workers", "io=2"],
                                env={"HYPHA_BROKER_URL": "redis://127.0.0.1:1/0",
                                     "HYPHA_STORE_URL": "sqlite:///x.db",
                                     "HYPHA_METRICS_PORT": "9000"})
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.stdout.splitlines()] == [
        "HYPHA_METRICS_PORT=9000", "HYPHA_METRICS_PORT=9001"]
    assert "hypha up: metrics: worker-io-1 on :9000, worker-io-2 on :9001" in result.stderr
    assert dry("--no-flower", "--no-console", "--no-beat")[0].startswith("hypha worker")


def test_metrics_ports_past_65535_are_one_line_exit_1(tmp_path: Path) -> None:
    proc = hypha("up", "--app", APP, "--workers", "io=3", "--metrics-port", "65534",
                 "--dry-run", cwd=tmp_path,
                 env=clean_env(HYPHA_BROKER_URL="redis://127.0.0.1:1/0"))
    assert "65535" in assert_one_line_error(proc, code=1)


def _scrape(port: int) -> str | None:
    try:
        return requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except requests.ConnectionError:
        return None


def _two_ports() -> int:
    """A port and the next, both free, below the kernel's ephemeral range (a port from
    ``free_port`` is in it: its neighbour can be taken by any outgoing connection -- a
    worker's own to Redis -- between the check and the bind)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    while True:
        base = rng.randrange(max(1024, low - 12_000), low - 2)
        if all(_bindable(p) for p in (base, base + 1)):
            return base


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def test_sigkilled_worker_is_restarted_and_each_worker_serves_its_metrics_port(
        redis_url: str, tmp_path: Path) -> None:
    """The fleet survives a loss: two workers, each on its own metrics port; SIGKILL one,
    hypha up says so, restarts it, and its port serves again."""
    base = _two_ports()
    env = clean_env(HYPHA_BROKER_URL=redis_url, HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'h.db'}",
                    PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([HYPHA, "up", "--app", "tests.metrics.worker_app:hypha",
                             "--workers", "cpu=1", "--workers", "io=1", "-c", "1",
                             "--no-beat", "--no-flower", "--no-console", "--grace", "10",
                             "--metrics-port", str(base), "--restart-backoff", "0.5",
                             "--logs", str(tmp_path / "logs")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output = Output(proc)
    try:
        row = output.wait_for(r"^worker-cpu-1\s+(\d+)\s+\S+\s+:(\d+)$", proc)
        assert int(row.group(2)) == base
        output.wait_for(rf"^worker-io-1\s+\d+\s+\S+\s+:{base + 1}$", proc)
        deadline = time.monotonic() + 120
        while not (_scrape(base) and _scrape(base + 1)):  # both listen, each its own
            assert proc.poll() is None and time.monotonic() < deadline, output.text()
            time.sleep(0.5)
        served = _scrape(base) or ""
        assert "hypha_queue_depth" in served
        assert 'hypha_runs_cancelled_total{graph="support"} 0.0' in served  # before any use
        os.kill(int(row.group(1)), signal.SIGKILL)
        output.wait_for(rf"worker-cpu-1 \(pid {row.group(1)}\) was killed by SIGKILL; "
                        r"restarting it in 0.5 s \(restart 1 of at most 5 within 10 min\)",
                        proc, timeout=30)
        again = output.wait_for(r"worker-cpu-1 restarted \(pid (\d+)\)", proc, timeout=30)
        assert psutil.Process(int(again.group(1))).is_running()
        deadline = time.monotonic() + 120
        while not _scrape(base):  # the restarted worker serves on its port again
            assert proc.poll() is None and time.monotonic() < deadline, output.text()
            time.sleep(0.5)
        assert proc.poll() is None  # the rest ran on
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, output.join(10)
        assert "stopped 2 processes" in output.join(10)
    finally:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()
