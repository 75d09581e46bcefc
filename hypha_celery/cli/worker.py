"""``hypha worker``: the Celery worker command line for a Hypha app."""

from __future__ import annotations

from collections.abc import Sequence

from hypha_celery.client.hypha import Hypha
from hypha_celery.errors import SetupError

POOLS = ("prefork", "threads", "solo")


def parse_queues(value: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; ``None`` or blank -> ``None`` (all)."""
    if value is None:
        return None
    names = [q.strip() for q in value.split(",") if q.strip()]
    return names or None


def worker_argv(
    hypha: Hypha, *, queues: Sequence[str] | None = None, pool: str = "prefork",
    concurrency: int | None = None, loglevel: str = "INFO", extra: Sequence[str] = (),
) -> list[str]:
    """Arguments for ``hypha.celery.worker_main``: every queue of the app by
    default (coordinator, nodes, dead letter and any node's own queue), task
    events on (``-E``) so Flower shows the ``graph.node`` tasks."""
    if hypha.settings.embedded:
        raise SetupError("hypha worker needs a broker: set HYPHA_BROKER_URL (e.g. "
                         "redis://127.0.0.1:6379/0); without one the embedded worker runs "
                         "inside the process that starts the run")
    if pool not in POOLS:
        raise SetupError(f"--pool must be one of {', '.join(POOLS)}, got {pool!r}")
    if concurrency is not None and concurrency < 1:
        raise SetupError("--concurrency must be >= 1")
    names = list(queues) if queues else sorted(hypha.queues())
    argv = ["worker", f"--pool={pool}", f"--queues={','.join(names)}", "--task-events",
            f"--loglevel={loglevel}"]
    if concurrency is not None:
        argv.append(f"--concurrency={concurrency}")
    argv.extend(extra)
    return argv
