"""Shared benchmark harness: services, the one worker process tree, statistics, output.

``BenchEnv`` claims an empty Redis database, creates a fresh PostgreSQL database,
imports :mod:`bench.app` (the hypha graphs and the raw Celery tasks on one Celery app),
migrates the store and spawns ONE ``celery worker -P prefork -c 2 -E`` that consumes
``hypha.coordinator,hypha.nodes,celery``. Every measurement, hypha or raw, talks to it.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUEUES = "hypha.coordinator,hypha.nodes,celery"
CONCURRENCY = 2


def _env(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


REDIS_BASE = _env("BENCH_REDIS_BASE", "redis://127.0.0.1:6379")
#: Databases the bench may claim when ``BENCH_REDIS_URL`` is not set (db 11 first: the
#: integration tests leave it to bench/). A database is claimed only when it is EMPTY,
#: with the same claim key the integration tests use, so neither side steals the other's.
CANDIDATE_DBS = (11, 5, 4, 3, 2, 1)
CLAIM_KEY = "hypha-itest:claim"
CLAIM_TTL = 3600
MARKER_KEY = "hypha-bench:db"  # no TTL: marks leftovers of a bench whose claim expired
PG_ADMIN_URL = _env("BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def new_token() -> str:
    """A bench's claim: ``bench:<host>:<pid>:<random>``, so a later bench on this host can
    tell that the process holding a claim has exited (:func:`_holder_gone`)."""
    return f"bench:{platform.node()}:{os.getpid()}:{uuid.uuid4().hex}"


#: Deletes the claim only if it still holds the value read (another bench may have taken it).
_DELETE_IF = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
              "return redis.call('del', KEYS[1]) end return 0")


def _holder_gone(held: bytes | None) -> bool:
    """Whether ``held`` is the claim of a bench process of this host that has exited (a
    killed bench: its claim would otherwise block the database for ``CLAIM_TTL``)."""
    parts = (held or b"").decode("utf-8", "replace").split(":")
    if len(parts) != 4 or parts[:2] != ["bench", platform.node()] or not parts[2].isdigit():
        return False
    try:
        os.kill(int(parts[2]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    return False


def _claim_redis(token: str) -> str:
    """``BENCH_REDIS_URL`` (flushed: the caller said so), else the first empty candidate
    database (or one a bench of this host left behind when it was killed), claimed."""
    import redis

    explicit = os.environ.get("BENCH_REDIS_URL", "").strip()
    if explicit and not os.environ.get("BENCH_REDIS_CLAIMED"):
        redis.Redis.from_url(explicit).flushdb()
        return explicit
    for db in CANDIDATE_DBS:
        url = f"{REDIS_BASE}/{db}"
        client = redis.Redis.from_url(url)
        try:
            held = client.get(CLAIM_KEY)
            if _holder_gone(held):
                client.eval(_DELETE_IF, 1, CLAIM_KEY, held)
            ours = client.exists(MARKER_KEY) and not client.exists(CLAIM_KEY)
            if (client.dbsize() == 0 or ours) and client.set(CLAIM_KEY, token, nx=True,
                                                             ex=CLAIM_TTL):
                for key in client.scan_iter(count=1000):  # a dead bench's leftovers
                    if key != CLAIM_KEY.encode():
                        client.delete(key)
                client.set(MARKER_KEY, token)
                os.environ["BENCH_REDIS_CLAIMED"] = "1"
                return url
        finally:
            client.close()
    raise RuntimeError(f"no empty Redis database among {CANDIDATE_DBS} on {REDIS_BASE}; "
                       "set BENCH_REDIS_URL to one the bench may flush")


def _release_redis(url: str, token: str) -> None:
    """Empty a database we claimed (only if the claim is still ours)."""
    import redis

    if not url or not os.environ.get("BENCH_REDIS_CLAIMED"):
        return
    client = redis.Redis.from_url(url)
    try:
        if client.get(CLAIM_KEY) == token.encode():
            client.flushdb()
    finally:
        client.close()


class ServerProcess:
    """A local server the bench starts as a process of its own (its threads do not share
    the driver's or a worker's interpreter): ``cmd`` prints its URL as its first line;
    ``GET <url>/_stats`` reports what it is doing."""

    def __init__(self, cmd: Sequence[str]) -> None:
        self.proc = subprocess.Popen(list(cmd), cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip().rstrip("/")

    def stats(self) -> dict[str, int]:
        import urllib.request

        with urllib.request.urlopen(f"{self.url}/_stats", timeout=5) as reply:
            doc: dict[str, int] = json.loads(reply.read())
        return doc

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


class ModelServer(ServerProcess):
    """The local model server (``tests/fakes/llm_server``: OpenAI's and Anthropic's wire
    protocols) answering every request after ``delay`` s with the text ``ok``."""

    def __init__(self, delay: float) -> None:
        super().__init__([sys.executable, "-m", "tests.fakes.llm_server", "--port", "0",
                          "--delay", str(delay), "--text", "ok"])


class BenchEnv:
    """Context manager owning the Redis db, the PostgreSQL db and the worker process."""

    pool = "prefork"
    concurrency = CONCURRENCY
    queues = QUEUES
    #: Set in the worker's environment besides the bench's own (e.g. ``BENCH_OBSERVE``).
    worker_env: dict[str, str] = {}

    def __init__(self, *, profile_dir: str | None = None) -> None:
        self.redis_url = ""
        self.token = new_token()
        self.db_name = f"hypha_bench_{uuid.uuid4().hex[:10]}"
        base, _, _ = PG_ADMIN_URL.rpartition("/")
        self.store_url = f"{base}/{self.db_name}"
        self.profile_dir = profile_dir
        self.worker: subprocess.Popen[bytes] | None = None
        self.app: Any = None
        self.log_path = RESULTS / f"worker-{self.db_name}.log"

    # -- lifecycle ---------------------------------------------------------
    def __enter__(self) -> BenchEnv:
        import sqlalchemy as sa

        RESULTS.mkdir(parents=True, exist_ok=True)
        self.redis_url = _claim_redis(self.token)
        admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{self.db_name}"')
        admin.dispose()
        os.environ["BENCH_REDIS_URL"] = self.redis_url
        os.environ["BENCH_STORE_URL"] = self.store_url
        if self.profile_dir:
            os.environ["BENCH_PROFILE"] = self.profile_dir
        sys.path.insert(0, str(ROOT))
        try:
            self.app = self._load_app()
            self._start_worker()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _load_app(self) -> Any:
        """The driver's side of the app (``.hypha``, ``.celery``, ``.add``), store migrated."""
        app = importlib.import_module("bench.app")
        app.hypha.store.migrate()
        return app

    def __exit__(self, *exc: object) -> None:
        self._stop_worker()
        if self.app is not None:
            self.app.hypha.close()
        _release_redis(self.redis_url, self.token)
        self._drop_clean_log()
        import sqlalchemy as sa

        admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        admin.dispose()

    def _start_worker(self) -> None:
        cmd = [sys.executable, "-m", "celery", "-A", "bench.app:celery", "worker",
               "-P", self.pool, "-c", str(self.concurrency), "-Q", self.queues, "-E",
               "--without-gossip", "--without-mingle", "--loglevel=WARNING",
               "-n", f"{self.db_name}@%h"]
        path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
        env = dict(os.environ, PYTHONPATH=path, **self.worker_env)
        log = self.log_path.open("wb")
        self.worker = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                       stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        assert self.app is not None and self.worker is not None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.worker.poll() is not None:
                raise RuntimeError(f"worker exited early, see {self.log_path}")
            if self.app.celery.control.ping(timeout=0.5):
                self.app.add.delay(1, 1).get(timeout=30)
                return
        raise RuntimeError(f"worker not ready after {timeout}s, see {self.log_path}")

    def _stop_worker(self) -> None:
        if self.worker is None or self.worker.poll() is not None:
            return
        self.worker.send_signal(signal.SIGTERM)  # warm shutdown
        try:
            self.worker.wait(30)
        except subprocess.TimeoutExpired:
            self.worker.kill()
            self.worker.wait(10)

    def _drop_clean_log(self) -> None:
        """Keep the worker log only when it has something to say."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return
        if "ERROR" not in text and "Traceback" not in text and "CRITICAL" not in text:
            self.log_path.unlink(missing_ok=True)
        else:
            print(f"[bench] worker log kept: {self.log_path}", file=sys.stderr)

    def foreign_messages(self) -> int:
        """Messages the worker received for tasks it does not know: someone else is
        using this broker database, and the numbers are not to be trusted."""
        try:
            return self.log_path.read_text(errors="replace").count("Received unregistered task")
        except OSError:
            return 0

    # -- helpers for the scripts -------------------------------------------
    def worker_memory(self) -> dict[str, Any]:
        """Resident memory of the worker main process and of its pool children (MB)."""
        import psutil

        assert self.worker is not None
        main = psutil.Process(self.worker.pid)
        kids = main.children(recursive=True)
        mb = 1024 * 1024

        def uss(p: psutil.Process) -> float:
            return float(p.memory_full_info().uss) / mb

        main_rss = main.memory_info().rss / mb
        kids_rss = [k.memory_info().rss / mb for k in kids]
        return {
            "main_rss_mb": round(main_rss, 2),
            "children_rss_mb": [round(x, 2) for x in kids_rss],
            "children_pids": [k.pid for k in kids],
            "total_rss_mb": round(main_rss + sum(kids_rss), 2),
            "total_uss_mb": round(uss(main) + sum(uss(k) for k in kids), 2),
        }


# -- statistics and output -------------------------------------------------------
def summary(samples: Sequence[float], scale: float = 1.0, digits: int = 3) -> dict[str, Any]:
    """Median / min / max of ``samples`` times ``scale`` (e.g. 1000 for ms)."""
    xs = [x * scale for x in samples]
    return {"median": round(statistics.median(xs), digits), "min": round(min(xs), digits),
            "max": round(max(xs), digits), "n": len(xs),
            "samples": [round(x, digits) for x in xs]}


def timed_run(hypha: Any, graph_id: str, expected: Any, run_ids: list[str],
              timeout: float = 120.0) -> Callable[[], float]:
    """A sample function: wall time of one ``start -> wait`` of ``graph_id``."""

    def sample() -> float:
        t0 = time.perf_counter()
        run = hypha.start(graph_id)
        result = run.wait(timeout=timeout)
        dt = time.perf_counter() - t0
        assert result == expected, result
        run_ids.append(run.id)
        return dt

    return sample


def interleaved(repeats: int, *fns: Callable[[], float]) -> list[list[float]]:
    """Run ``fns`` round-robin ``repeats`` times (so drift hits every side alike)."""
    out: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            out[i].append(fn())
    return out


def target(name: str, value: float, op: str, limit: float) -> dict[str, Any]:
    ok = value <= limit if op == "<=" else value >= limit
    return {"name": name, "value": round(value, 3), "op": op, "target": limit, "pass": ok}


def python_loop_ms() -> float:
    """Milliseconds for a fixed pure-Python loop (5,000,000 additions), best of 3: how
    fast this host runs Python at the moment. Shared VMs vary from run to run (this loop
    took 184 ms and 320 ms on the same machine within an hour), so compare results taken
    at similar figures."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        for i in range(5_000_000):
            total += i
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def machine_info() -> dict[str, Any]:
    import celery
    import kombu
    import psycopg
    import redis
    import sqlalchemy

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "nproc": os.cpu_count(), "cpu": cpu, "platform": platform.platform(),
        "python": platform.python_version(), "celery": celery.__version__,
        "kombu": kombu.__version__, "redis_py": redis.__version__,
        "sqlalchemy": sqlalchemy.__version__, "psycopg": psycopg.__version__,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "python_loop_ms_at_start": python_loop_ms(),
    }
    try:
        info["redis_server"] = redis.Redis.from_url(REDIS_BASE).info("server")["redis_version"]
    except redis.RedisError:
        info["redis_server"] = None
    return info


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def setup_info(env: BenchEnv) -> dict[str, Any]:
    assert env.app is not None
    settings = env.app.hypha.settings
    return {"hypha_commit": _git("rev-parse", "--short", "HEAD"),
            "inline_coordinator": settings.inline_coordinator,
            "local_steps_budget_s": getattr(settings, "local_budget", None),
            "hypha_uncommitted_changes": bool(_git("status", "--porcelain", "--",
                                                   "hypha_celery")),
            "broker": env.redis_url, "result_backend": env.redis_url,
            "store": env.store_url.split("@")[-1],
            "worker": f"celery worker -P prefork -c {CONCURRENCY} -Q {QUEUES} -E "
                      "--without-gossip --without-mingle"}


def pg_server_version() -> str | None:
    """The bench PostgreSQL server's version (None when it cannot be reached)."""
    import sqlalchemy as sa

    engine = sa.create_engine(PG_ADMIN_URL)
    try:
        with engine.connect() as conn:
            return str(conn.exec_driver_sql("SHOW server_version").scalar())
    except sa.exc.SQLAlchemyError:
        return None
    finally:
        engine.dispose()


def emit(name: str, doc: dict[str, Any]) -> None:
    """Write ``bench/results/<name>.json`` and print the document to stdout."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=2)
    (RESULTS / f"{name}.json").write_text(text + "\n")
    print(text)


def run_bench(name: str, bench: Callable[[], dict[str, Any]]) -> int:
    """The ``main`` of a bench that starts its own services (or needs none): machine
    info, ``bench()``'s results with their ``targets`` lifted to the top, ``all_pass``,
    the load at the end and the duration, written and printed by :func:`emit`."""
    t0 = time.monotonic()
    doc: dict[str, Any] = {"machine": machine_info()}
    doc[name] = bench()
    _finish(name, doc, t0)
    return 0


def _finish(name: str, doc: dict[str, Any], t0: float) -> None:
    """The machine at the end, ``targets`` lifted to the top, ``all_pass``, the
    duration; then :func:`emit`."""
    doc["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["machine"]["python_loop_ms_at_end"] = python_loop_ms()
    doc["targets"] = doc[name].pop("targets")
    doc["all_pass"] = all(t["pass"] for t in doc["targets"])
    doc["duration_s"] = round(time.monotonic() - t0, 1)
    emit(name, doc)


def standalone(name: str, bench: Callable[[BenchEnv], dict[str, Any]]) -> None:
    """``python bench/<name>.py``: own environment, one benchmark, JSON out."""
    t0 = time.monotonic()
    with BenchEnv() as env:
        doc = {"machine": machine_info(), "setup": setup_info(env), name: bench(env)}
        doc["setup"]["foreign_messages_in_worker_log"] = env.foreign_messages()
    _finish(name, doc, t0)
