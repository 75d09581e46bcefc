"""The same LangGraph ``StateGraph`` run by LangGraph in one process and by
``hypha_celery.langgraph.distribute`` on real workers, side by side.

    .venv/bin/python bench/langgraph.py        # ~1-2 min; bench/results/langgraph.json
    BENCH_LG_REPEATS=5 BENCH_LG_SEND_REPEATS=2 .venv/bin/python bench/langgraph.py

One environment (:class:`LangGraphEnv`): a claimed Redis database, a fresh PostgreSQL
database for hypha's store, a private PostgreSQL database for LangGraph's
``PostgresSaver``, and two workers importing ``bench.app_langgraph`` (where the graphs are
``distribute`` d): the harness's ``celery worker -P prefork -c 2`` (coordinator, nodes)
and one ``hypha worker --profile io`` (threads, ``hypha.agents,hypha.io``). The local
model server (``tests/fakes/llm_server``, a process of its own: :class:`ModelServer`)
answers every request after ``DELAY`` (0.2 s).

* ``linear``: :func:`bench.anchor_langgraph.linear_builder` (20 nodes in a row, each
  adding 1). LangGraph: ``invoke`` with ``PostgresSaver``, ``durability="sync"`` (a step's
  checkpoint written before the next: what hypha's store gives) and, for reference,
  LangGraph's default ``"async"``; hypha: ``DistributedGraph.invoke`` of ``lg_linear20``;
  floor: hypha's own ``bench_linear20`` (``bench/app.py``). Warm-ups, then the sides
  interleaved ``REPEATS`` times, each invoke a new thread. Per step = wall time / 20.
  Target ``langgraph_linear_per_step_ratio`` (hypha / LangGraph sync) <= 2.0.
* ``send``: ``Send("wait", i)`` x 100, each node one chat completion request to the
  model server (200 ms, plain HTTP), then
  ``merge``. LangGraph: ``invoke`` in this process on its default executor (a thread pool
  of ``min(32, CPUs + 4)`` threads: ``max_concurrency`` unset), without a checkpointer
  and with ``PostgresSaver`` (sync); hypha: ``lg_send100`` with ``wait`` routed to
  ``hypha.io``. Target ``langgraph_send100_io_wall_ratio`` (hypha / LangGraph without a
  checkpointer, the faster of LangGraph's two) <= 0.5.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: bench/ must not be on sys.path (this
    # file's name would shadow LangGraph itself); the repository root must
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._harness import (
    PG_ADMIN_URL,
    ROOT,
    BenchEnv,
    ModelServer,
    _finish,
    interleaved,
    machine_info,
    setup_info,
    summary,
    target,
    timed_run,
)
from bench.agents_io import HYPHA

STEPS = 20
WIDTH = 100
DELAY = 0.2
REPEATS = int(os.environ.get("BENCH_LG_REPEATS", "10"))
SEND_REPEATS = int(os.environ.get("BENCH_LG_SEND_REPEATS", "3"))
WARMUP = 2
TARGET_LINEAR = 2.0
TARGET_SEND = 0.5


# -- the environment -----------------------------------------------------------------------
class LangGraphEnv(BenchEnv):
    """:class:`BenchEnv` whose worker imports ``bench.app_langgraph``, plus one
    ``hypha worker --profile io`` beside it."""

    def __init__(self) -> None:
        super().__init__()
        self.io: subprocess.Popen[bytes] | None = None

    def _load_app(self) -> Any:
        import importlib

        app = importlib.import_module("bench.app_langgraph")
        app.hypha.store.migrate()
        return app

    def _start_worker(self) -> None:
        path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
        env = dict(os.environ, PYTHONPATH=path)
        log = self.log_path.open("wb")
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench.app_langgraph:celery", "worker",
             "-P", self.pool, "-c", str(self.concurrency), "-Q", self.queues, "-E",
             "--without-gossip", "--without-mingle", "--loglevel=WARNING",
             "-n", f"{self.db_name}@%h"], cwd=ROOT, env=env, stdout=log,
            stderr=subprocess.STDOUT)
        self.io = subprocess.Popen(
            [HYPHA, "worker", "--app", "bench.app_langgraph:hypha", "--profile", "io",
             "--loglevel", "WARNING", f"--hostname={self.db_name}-io@%h",
             "--without-gossip", "--without-mingle"], cwd=ROOT, env=env, stdout=log,
            stderr=subprocess.STDOUT)
        self._wait_ready()
        self._wait_io()

    def _wait_io(self, timeout: float = 60.0) -> None:
        import socket

        assert self.io is not None
        name = f"{self.db_name}-io@{socket.gethostname()}"
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.io.poll() is not None:
                raise RuntimeError(f"the io worker exited early, see {self.log_path}")
            if self.app.celery.control.ping(destination=[name], timeout=0.5):
                return
        raise RuntimeError(f"the io worker is not ready after {timeout}s")

    def _stop_worker(self) -> None:
        if self.io is not None and self.io.poll() is None:
            self.io.send_signal(signal.SIGTERM)
            try:
                self.io.wait(30)
            except subprocess.TimeoutExpired:
                self.io.kill()
                self.io.wait(10)
        super()._stop_worker()


def _checkpoint_db(stack: ExitStack) -> str:
    """A private PostgreSQL database for LangGraph's checkpointer, dropped at the end;
    its libpq URL."""
    import sqlalchemy as sa

    name = f"hypha_bench_lg_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()

    stack.callback(drop)
    base = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://").rpartition("/")[0]
    return f"{base}/{name}"


def _distributed(graph: Any, initial: dict[str, Any], check: Callable[[Any], bool],
                 ) -> Callable[[], float]:
    def sample() -> float:
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        t0 = time.perf_counter()
        out = graph.invoke(dict(initial), config, timeout=120)
        dt = time.perf_counter() - t0
        if not check(out):
            raise RuntimeError(f"distribute {graph.id}: unexpected result {out!r}")
        return dt

    return sample


def _warm(fns: list[Callable[[], float]], times: int) -> None:
    for fn in fns:
        for _ in range(times):
            fn()


def _linear(env: LangGraphEnv, saver: Any) -> dict[str, Any]:
    from bench.anchor_langgraph import Variant, linear_builder, linear_check

    app = env.app
    run_ids: list[str] = []
    sides = {"langgraph_postgres_sync": Variant("postgres", saver, "sync").sampler(
                 linear_builder(), {"n": 0}, linear_check),
             "langgraph_postgres_async": Variant("postgres_async", saver, "async").sampler(
                 linear_builder(), {"n": 0}, linear_check),
             "distribute": _distributed(app.LINEAR, {"n": 0}, linear_check),
             "hypha_native_bench_linear20": timed_run(app.hypha, "bench_linear20",
                                                      {"steps": STEPS}, run_ids, timeout=60)}
    _warm(list(sides.values()), WARMUP)
    samples = interleaved(REPEATS, *sides.values())
    out = {name: {"per_step_ms": summary(xs, 1000 / STEPS), "run_ms": summary(xs, 1000)}
           for name, xs in zip(sides, samples, strict=True)}
    per = {name: statistics.median(xs) for name, xs in zip(sides, samples, strict=True)}
    ratio = per["distribute"] / per["langgraph_postgres_sync"]
    return {"steps": STEPS, "repeats": REPEATS, "sides": out,
            "ratio_distribute_to_langgraph_postgres_sync": round(ratio, 3),
            "ratio_distribute_to_langgraph_postgres_async": round(
                per["distribute"] / per["langgraph_postgres_async"], 3),
            "ratio_distribute_to_hypha_native": round(
                per["distribute"] / per["hypha_native_bench_linear20"], 3),
            "targets": [target("langgraph_linear_per_step_ratio", ratio, "<=", TARGET_LINEAR)]}


def _send(env: LangGraphEnv, saver: Any, server: ModelServer) -> dict[str, Any]:
    from bench.anchor_langgraph import Variant
    from bench.app_langgraph import send_builder

    def check(out: Any) -> bool:
        return isinstance(out, dict) and out.get("total") == WIDTH

    sides = {"langgraph_memory": Variant("memory", None, None).sampler(
                 send_builder(), {}, check),
             "langgraph_postgres_sync": Variant("postgres", saver, "sync").sampler(
                 send_builder(), {}, check),
             "distribute_io": _distributed(env.app.SEND, {}, check)}
    _warm(list(sides.values()), 1)
    samples = interleaved(SEND_REPEATS, *sides.values())
    out = {name: {"wall_ms": summary(xs, 1000, 1)} for name, xs in zip(sides, samples,
                                                                        strict=True)}
    med = {name: statistics.median(xs) for name, xs in zip(sides, samples, strict=True)}
    ratio = med["distribute_io"] / min(med["langgraph_memory"],
                                       med["langgraph_postgres_sync"])
    return {"width": WIDTH, "delay_s": DELAY, "repeats": SEND_REPEATS,
            "langgraph_executor_threads": min(32, (os.cpu_count() or 1) + 4),
            "floor_ms": DELAY * 1000, "sides": out,
            "ratio_distribute_to_langgraph_memory": round(
                med["distribute_io"] / med["langgraph_memory"], 3),
            "ratio_distribute_to_langgraph_postgres_sync": round(
                med["distribute_io"] / med["langgraph_postgres_sync"], 3),
            "server": server.stats(),
            "targets": [target("langgraph_send100_io_wall_ratio", ratio, "<=", TARGET_SEND)]}


def bench(env: LangGraphEnv, server: ModelServer) -> dict[str, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    from bench.anchor_langgraph import versions

    with ExitStack() as stack:
        saver = stack.enter_context(PostgresSaver.from_conn_string(_checkpoint_db(stack)))
        saver.setup()
        linear = _linear(env, saver)
        send = _send(env, saver, server)
    targets = linear.pop("targets") + send.pop("targets")
    return {"versions": versions(), "io_worker": "hypha worker --profile io (threads, 500, "
            "hypha.agents,hypha.io)", "linear": linear, "send": send, "targets": targets}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.parse_args(argv)
    server = ModelServer(DELAY)
    os.environ["BENCH_LG_IO_URL"] = server.url  # the workers' and this process's nodes
    t0 = time.monotonic()
    try:
        env = LangGraphEnv()
        with env:
            doc = {"machine": machine_info(), "setup": setup_info(env),
                   "langgraph": bench(env, server)}
            doc["setup"]["foreign_messages_in_worker_log"] = env.foreign_messages()
    finally:
        server.close()
    _finish("langgraph", doc, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
