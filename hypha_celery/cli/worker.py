"""``hypha worker``: the Celery worker command line for a Hypha app, by profile.

* ``default``: every queue of the app on the pool asked for (prefork unless told);
* ``io``: the agents' turns and the network-bound nodes (``hypha.agents``,
  ``hypha.io``) on a thread pool of ``IO_CONCURRENCY`` threads: a turn or a model call
  waits on the network, so a thread each, not a process each;
* ``cpu``: every other queue (coordinator, nodes, effects, nodes' own) on prefork.

An explicit ``--queues``, ``--pool`` or ``--concurrency`` overrides the profile's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypha_celery.client.hypha import Hypha
from hypha_celery.errors import SetupError
from hypha_celery.runtime.config import AGENTS_QUEUE, IO_QUEUE

POOLS = ("prefork", "threads", "solo")
PROFILES = ("default", "io", "cpu")
#: Threads of the ``io`` profile: turns and model calls in flight per worker process.
IO_CONCURRENCY = 500
#: What the ``io`` profile consumes.
IO_QUEUES = (AGENTS_QUEUE, IO_QUEUE)


@dataclass(frozen=True)
class Profile:
    """A profile's pool, concurrency (None: Celery's default, the CPU count) and queues
    (None: every queue of the app)."""

    pool: str
    concurrency: int | None
    queues: list[str] | None


def parse_queues(value: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; ``None`` or blank -> ``None`` (all)."""
    if value is None:
        return None
    names = [q.strip() for q in value.split(",") if q.strip()]
    return names or None


def profile(hypha: Hypha, name: str) -> Profile:
    if name == "io":
        return Profile("threads", IO_CONCURRENCY, list(IO_QUEUES))
    if name == "cpu":
        return Profile("prefork", None, sorted(hypha.queues() - set(IO_QUEUES)))
    if name == "default":
        return Profile("prefork", None, None)
    raise SetupError(f"--profile must be one of {', '.join(PROFILES)}, got {name!r}")


def worker_argv(
    hypha: Hypha, *, queues: Sequence[str] | None = None, pool: str | None = None,
    concurrency: int | None = None, loglevel: str = "INFO", extra: Sequence[str] = (),
    profile_name: str = "default",
) -> list[str]:
    """Arguments for ``hypha.celery.worker_main``: the profile's pool, concurrency and
    queues (``default``: every queue of the app: coordinator, nodes, effects, agents, io
    and any node's own queue), task events on (``-E``) so Flower shows the tasks."""
    if hypha.settings.embedded:
        raise SetupError("hypha worker needs a broker: set HYPHA_BROKER_URL (e.g. "
                         "redis://127.0.0.1:6379/0); without one the embedded worker runs "
                         "inside the process that starts the run")
    chosen = profile(hypha, profile_name)
    pool = pool or chosen.pool
    if pool not in POOLS:
        raise SetupError(f"--pool must be one of {', '.join(POOLS)}, got {pool!r}")
    if concurrency is not None and concurrency < 1:
        raise SetupError("--concurrency must be >= 1")
    concurrency = concurrency or chosen.concurrency
    names = list(queues) if queues else (chosen.queues or sorted(hypha.queues()))
    argv = ["worker", f"--pool={pool}", f"--queues={','.join(names)}", "--task-events",
            f"--loglevel={loglevel}"]
    if concurrency is not None:
        argv.append(f"--concurrency={concurrency}")
    argv.extend(extra)
    return argv
