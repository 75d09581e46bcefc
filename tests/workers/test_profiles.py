"""workers/: every profile loads, ``hypha worker --profile workers/X.py`` builds its
command line, a bad profile file is a one-line error, and a plain ``celery worker``
started with a profile's options consumes exactly its queues."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from hypha_celery import Hypha, Settings
from hypha_celery.cli.worker import Profile, load_profile, worker_argv
from hypha_celery.errors import SetupError
from tests.cli.helpers import ROOT, assert_one_line_error, clean_env, hypha
from tests.integration.helpers import REPO, wait_until

WORKERS = ROOT / "workers"
PROFILES = sorted(p for p in WORKERS.glob("*.py") if not p.name.startswith("_"))
HYPHA_QUEUES = {"hypha.coordinator", "hypha.nodes", "hypha.effects", "hypha.agents",
                "hypha.io"}


@pytest.fixture
def app() -> Iterator[Hypha]:
    app = Hypha(Settings("redis://127.0.0.1:1/0", "redis://127.0.0.1:1/0", "sqlite://",
                         embedded=False))
    yield app
    app.close()


def test_every_role_has_a_profile_and_each_loads() -> None:
    assert [p.stem for p in PROFILES] == ["agents", "coordinator", "effects", "llm", "nodes"]
    consumed: list[str] = []
    for path in PROFILES:
        profile = load_profile(path)
        assert profile.queues and set(profile.queues) <= HYPHA_QUEUES, path
        consumed.extend(profile.queues)
    assert sorted(consumed) == sorted(HYPHA_QUEUES)  # every queue, each by one role
    assert load_profile(WORKERS / "llm.py") == Profile("gevent", 1000, ["hypha.io"], 1)
    assert load_profile(WORKERS / "agents.py") == Profile("gevent", 1000, ["hypha.agents"], 1)
    assert load_profile(WORKERS / "effects.py") == Profile("prefork", None, ["hypha.effects"], 1)


def test_hypha_worker_argv_from_a_profile_file(app: Hypha) -> None:
    argv = worker_argv(app, profile_name="workers/llm.py")
    assert argv == ["worker", "--pool=gevent", "--queues=hypha.io", "--task-events",
                    "--loglevel=INFO", "--concurrency=1000", "--prefetch-multiplier=1"]
    argv = worker_argv(app, profile_name="workers/coordinator.py", concurrency=2)
    assert argv == ["worker", "--pool=prefork", "--queues=hypha.coordinator", "--task-events",
                    "--loglevel=INFO", "--concurrency=2", "--prefetch-multiplier=4"]
    # explicit options still override the profile's
    argv = worker_argv(app, profile_name="workers/nodes.py", queues=["hypha.nodes", "gpu"],
                       pool="solo")
    assert argv[1:3] == ["--pool=solo", "--queues=hypha.nodes,gpu"]


@pytest.mark.parametrize(("text", "problem"), [
    ("queues = ['hypha.io']\nworker_pol = 'threads'\n", "unknown setting 'worker_pol'"),
    ("queues = ['hypha.io']\nworker_pool = 'eventlet'\n", "worker_pool must be one of"),
    ("queues = ['hypha.io']\nworker_concurrency = '500'\n", "worker_concurrency must be"),
    ("queues = ['hypha.io']\nworker_prefetch_multiplier = 0\n",
     "worker_prefetch_multiplier must be"),
    ("queues = 'hypha.io'\n", "queues must be a non-empty list"),
    ("worker_pool = 'threads'\n", "queues must be a non-empty list"),
    ("queues = ['hypha.dead_letter']\n", "hypha.dead_letter"),
    ("queues = [\n", "the profile does not load: SyntaxError"),
])
def test_a_bad_profile_file_names_the_file_and_the_setting(tmp_path: Path, text: str,
                                                          problem: str) -> None:
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(SetupError) as info:
        load_profile(path)
    assert str(info.value).startswith(f"{path}: ")
    assert problem in str(info.value)


def test_unknown_queues_and_missing_files(app: Hypha, tmp_path: Path) -> None:
    path = tmp_path / "typo.py"
    path.write_text("queues = ['hypha.llm']\n")
    with pytest.raises(SetupError, match="hypha.llm not a queue of the app"):
        worker_argv(app, profile_name=str(path))
    with pytest.raises(SetupError, match="no profile file"):
        worker_argv(app, profile_name="workers/nope.py")
    with pytest.raises(SetupError, match="or a profile file"):
        worker_argv(app, profile_name="gpu")


def test_the_cli_error_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("queues = ['hypha.io']\nworker_pool = 'eventlet'\n")
    env = clean_env(HYPHA_BROKER_URL="redis://127.0.0.1:1/0",
                    HYPHA_RESULT_BACKEND="redis://127.0.0.1:1/0",
                    HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'h.db'}")
    proc = hypha("worker", "--app", "tests.workers.app:hypha", "--profile", str(path),
                 env=env)
    line = assert_one_line_error(proc)
    assert f"{path}: worker_pool must be one of prefork, threads, solo" in line


def test_python_m_workers_prints_the_celery_options() -> None:
    done = subprocess.run([sys.executable, "-m", "workers", "llm"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["--pool=gevent", "--queues=hypha.io", "--concurrency=1000",
                                   "--prefetch-multiplier=1"]
    bad = subprocess.run([sys.executable, "-m", "workers", "nope"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("workers: error: ")


def test_a_plain_celery_worker_started_from_a_profile_consumes_exactly_its_queues(
        redis_url: str, tmp_path: Path) -> None:
    options = subprocess.run([sys.executable, "-m", "workers", "llm"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60,
                             check=True).stdout.split()
    name = f"w{uuid.uuid4().hex[:10]}@profiles"
    env = clean_env(HYPHA_BROKER_URL=redis_url, HYPHA_RESULT_BACKEND=redis_url,
                    HYPHA_STORE_URL=f"sqlite:///{tmp_path / 'h.db'}", PYTHONUNBUFFERED="1")
    log = tmp_path / "worker.log"
    control = Celery(broker=redis_url, backend=redis_url)
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "tests.workers.app:celery",
                                 "worker", *options, "-n", name, "--without-mingle",
                                 "--without-gossip", "-l", "WARNING"],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        def answered() -> object:
            assert proc.poll() is None, log.read_text()
            return control.control.inspect(destination=[name], timeout=1.0).active_queues()

        queues = wait_until(answered, 60, "the worker to answer", log.read_text)
        assert sorted(q["name"] for q in queues[name]) == ["hypha.io"]
        stats = control.control.inspect(destination=[name], timeout=2.0).stats()[name]
        assert stats["pool"]["max-concurrency"] == 1000
        assert stats["prefetch_count"] == 1000  # concurrency × prefetch multiplier 1
        assert stats["pool"]["implementation"] == "celery.concurrency.gevent:TaskPool"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        control.close()
