"""DBOS Transact, the anchor: bench ``linear``'s and ``fanout``'s workloads as DBOS workflows.

``linear``: one workflow calling ``STEPS`` (20) ``@DBOS.step()`` no-ops in a row (each
adds 1), every step's output checkpointed in DBOS's system database before the next.
``fanout``: one workflow starting ``WIDTH`` (100) child workflows of one step each with
``DBOS.start_workflow`` (they run on DBOS's thread pool at once; a ``Queue`` would add
its polling interval) and summing their results.

DBOS is configured here, in code (no ``dbos-config.yaml``): its system database is a
private database on the bench's PostgreSQL server, created and dropped by the bench.
Workflows are called directly from this process, which is DBOS's executor.

Importing this module registers the workflows with DBOS's global registry; only
``bench/anchors.py`` imports it, inside its ``bench()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version

from dbos import DBOS, DBOSConfig

STEPS = 20
WIDTH = 100


@DBOS.step(name="hypha_bench.inc")
def inc(n: int) -> int:
    return n + 1


@DBOS.workflow(name="hypha_bench.linear")
def linear(steps: int) -> int:
    n = 0
    for _ in range(steps):
        n = inc(n)
    return n


@DBOS.step(name="hypha_bench.one")
def one() -> int:
    return 1


@DBOS.workflow(name="hypha_bench.edge")
def edge() -> int:
    return one()


@DBOS.workflow(name="hypha_bench.fanout")
def fanout(width: int) -> int:
    handles = [DBOS.start_workflow(edge) for _ in range(width)]
    return sum(h.get_result() for h in handles)


@contextmanager
def launched(pg_url: str) -> Iterator[None]:
    """DBOS launched on ``pg_url`` (a libpq URL of an empty database), destroyed after."""
    config: DBOSConfig = {"name": "hypha-bench-anchor", "system_database_url": pg_url,
                          "log_level": "WARNING", "application_version": "bench"}
    DBOS(config=config)
    try:
        DBOS.launch()
        yield
    finally:
        DBOS.destroy(destroy_registry=False)


def _timed(fn: Callable[[], int], expected: int, what: str) -> Callable[[], float]:
    def sample() -> float:
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        if out != expected:
            raise RuntimeError(f"dbos {what}: unexpected result {out!r}")
        return dt

    return sample


def linear_sampler() -> Callable[[], float]:
    return _timed(lambda: linear(STEPS), STEPS, "linear")


def fanout_sampler() -> Callable[[], float]:
    return _timed(lambda: fanout(WIDTH), WIDTH, "fanout")


def versions() -> dict[str, str | None]:
    try:
        return {"dbos": version("dbos")}
    except PackageNotFoundError:
        return {"dbos": None}
