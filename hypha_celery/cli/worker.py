"""``hypha worker``: the Celery worker command line for a Hypha app, by profile.

* ``default``: every queue of the app on the pool asked for (prefork unless told);
* ``io``: the agents' turns and the network-bound nodes (``hypha.agents``,
  ``hypha.io``) on gevent's pool of ``IO_CONCURRENCY`` greenlets: a turn or a model call
  waits on the network, so a greenlet each, not a process or a thread each (see
  :func:`green`);
* ``cpu``: every other queue (coordinator, nodes, effects, nodes' own) on prefork;
* a profile file (``workers/llm.py``): a Python module of plain Celery worker settings
  (``worker_pool``, ``worker_concurrency``, ``worker_prefetch_multiplier``,
  ``worker_max_tasks_per_child``, ``worker_max_memory_per_child``) and ``queues``, the
  queues to consume (Celery's ``-Q``), see :func:`load_profile`.

An explicit ``--queues``, ``--pool`` or ``--concurrency`` overrides the profile's.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from hypha_celery.client.hypha import Hypha
from hypha_celery.errors import SetupError
from hypha_celery.runtime.config import AGENTS_QUEUE, DEAD_LETTER_QUEUE, IO_QUEUE

POOLS = ("prefork", "threads", "solo", "gevent")
PROFILES = ("default", "io", "cpu")
#: The ``io`` profile's pool: gevent's, one thread and a greenlet per task. Measured on
#: ``bench/agents_io.py``'s burst against the thread pool (the same tuning): 1-15 % less
#: worker CPU and 6-27 % less PostgreSQL CPU per turn in three runs, 7 threads instead of
#: 551: no thread waits for the GIL, a turn gives the CPU up only where it waits on the
#: network.
IO_POOL = "gevent"
#: Greenlets of the ``io`` profile: turns and model calls in flight per worker process.
#: A waiting greenlet costs a few KB and no CPU: 1,000 (as many as the SDK clients'
#: connection pools hold) let two processes keep 1,200 turns in flight where 2 x 500
#: held 1,000 (``bench/agents_io.py``'s clients: all ended after 18 s instead of 24, the
#: same worker CPU per turn). CPU, not greenlets, bounds a process.
IO_CONCURRENCY = 1000
#: What the ``io`` profile consumes.
IO_QUEUES = (AGENTS_QUEUE, IO_QUEUE)
#: The ``io`` profile's garbage-collector thresholds (``gc.set_threshold``): a young
#: collection after 50,000 net container allocations instead of 700. Hundreds of turns
#: in flight keep many young objects alive, which every young collection walks again;
#: measured on ``bench/agents_io.py``'s burst, about 0.4 ms of worker CPU less per turn.
#: The cost: cyclic garbage lives longer (a few MB at most).
IO_GC_THRESHOLD = (50_000, 20, 20)
#: The ``io`` profile's GIL switch interval (``sys.setswitchinterval``), 10 x Python's 5 ms:
#: each thread waiting for the GIL wakes up once per interval to ask for it, so with
#: hundreds of threads the default costs a storm of wake-ups (measured: about 0.4 ms of
#: worker CPU less per turn in the burst; 20 ms and 200 ms gained nothing). The cost: a
#: thread running Python without I/O may hold the others up to 50 ms at a time.
IO_SWITCH_INTERVAL = 0.05


#: The settings a profile file may set: name -> the ``celery worker`` option it becomes.
FILE_SETTINGS = {"queues": "--queues", "worker_pool": "--pool",
                 "worker_concurrency": "--concurrency",
                 "worker_prefetch_multiplier": "--prefetch-multiplier",
                 "worker_max_tasks_per_child": "--max-tasks-per-child",
                 "worker_max_memory_per_child": "--max-memory-per-child"}


@dataclass(frozen=True)
class Profile:
    """A profile's pool, concurrency (None: Celery's default, the CPU count), queues
    (None: every queue of the app) and, from a profile file, the other worker options
    (None: Celery's default)."""

    pool: str
    concurrency: int | None
    queues: list[str] | None
    prefetch_multiplier: int | None = None
    max_tasks_per_child: int | None = None
    max_memory_per_child: int | None = None
    #: ``gc.set_threshold`` for the worker process, after ``gc.freeze()`` of what the app
    #: loaded, and ``sys.setswitchinterval`` (None: Python's defaults).
    gc_threshold: tuple[int, int, int] | None = None
    switch_interval: float | None = None

    def celery_options(self) -> list[str]:
        """The profile as ``celery worker`` options (what ``python -m workers NAME``
        prints for a plain ``celery -A APP worker``)."""
        argv = [f"--pool={self.pool}"]
        if self.queues:
            argv.append(f"--queues={','.join(self.queues)}")
        if self.concurrency is not None:
            argv.append(f"--concurrency={self.concurrency}")
        return argv + self.more_options()

    def more_options(self) -> list[str]:
        """The options besides pool, queues and concurrency."""
        return [f"{flag}={value}" for flag, value in (
            ("--prefetch-multiplier", self.prefetch_multiplier),
            ("--max-tasks-per-child", self.max_tasks_per_child),
            ("--max-memory-per-child", self.max_memory_per_child)) if value is not None]


def is_profile_file(name: str) -> bool:
    """``--profile`` names a file (``workers/llm.py``), not one of :data:`PROFILES`."""
    return name.endswith(".py") or "/" in name


def load_profile(path: str | Path) -> Profile:
    """The profile in a Python file of plain Celery worker settings (module-level names;
    private names, imports, functions and classes are ignored). ``queues`` (a non-empty
    list of queue names) is required; ``worker_pool`` defaults to prefork; the rest to
    Celery's defaults. Anything else, a wrong type or an unknown pool: :class:`SetupError`
    naming the file and the setting."""
    where = str(path)
    module = _import_file(Path(path))
    values: dict[str, object] = {}
    for key, value in vars(module).items():
        if key.startswith("_") or key == "annotations" or isinstance(value, ModuleType | type):
            continue
        if callable(value):
            continue
        if key not in FILE_SETTINGS:
            raise SetupError(f"{where}: unknown setting {key!r} (a profile sets "
                             f"{', '.join(FILE_SETTINGS)})")
        values[key] = value
    queues = values.get("queues")
    if (not isinstance(queues, list | tuple) or not queues
            or not all(isinstance(q, str) and q.strip() for q in queues)):
        raise SetupError(f"{where}: queues must be a non-empty list of queue names, "
                         f"got {queues!r}")
    if DEAD_LETTER_QUEUE in queues:
        raise SetupError(f"{where}: queues: {DEAD_LETTER_QUEUE} holds dead letters for "
                         "hypha dlq, never a worker's")
    pool = values.get("worker_pool", "prefork")
    if pool not in POOLS:
        raise SetupError(f"{where}: worker_pool must be one of {', '.join(POOLS)}, "
                         f"got {pool!r}")
    numbers: dict[str, int | None] = {}
    for key in ("worker_concurrency", "worker_prefetch_multiplier",
                "worker_max_tasks_per_child", "worker_max_memory_per_child"):
        value = values.get(key)
        if value is not None and (type(value) is not int or value < 1):
            raise SetupError(f"{where}: {key} must be an integer >= 1 or None, "
                             f"got {value!r}")
        numbers[key] = value
    return Profile(str(pool), numbers["worker_concurrency"], [q.strip() for q in queues],
                   numbers["worker_prefetch_multiplier"],
                   numbers["worker_max_tasks_per_child"],
                   numbers["worker_max_memory_per_child"])


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise SetupError(f"--profile: no profile file {str(path)!r}")
    spec = importlib.util.spec_from_file_location(
        f"_hypha_profile_{uuid.uuid4().hex[:8]}", path)
    if spec is None or spec.loader is None:
        raise SetupError(f"--profile: {str(path)!r} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise SetupError(f"{path}: the profile does not load: {type(exc).__name__}: "
                         f"{exc}") from None
    return module


def parse_queues(value: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; ``None`` or blank -> ``None`` (all)."""
    if value is None:
        return None
    names = [q.strip() for q in value.split(",") if q.strip()]
    return names or None


def profile(hypha: Hypha, name: str) -> Profile:
    if name == "io":
        return Profile(IO_POOL, IO_CONCURRENCY, list(IO_QUEUES),
                       gc_threshold=IO_GC_THRESHOLD, switch_interval=IO_SWITCH_INTERVAL)
    if name == "cpu":
        return Profile("prefork", None, sorted(hypha.queues() - set(IO_QUEUES)))
    if name == "default":
        return Profile("prefork", None, None)
    if is_profile_file(name):
        chosen = load_profile(name)
        unknown = sorted(set(chosen.queues or ()) - hypha.queues())
        if unknown:
            raise SetupError(f"{name}: queues: {', '.join(unknown)} not a queue of the app "
                             f"(its queues: {', '.join(sorted(hypha.queues()))})")
        return chosen
    raise SetupError(f"--profile must be one of {', '.join(PROFILES)} or a profile file "
                     f"(workers/llm.py), got {name!r}")


def tune(chosen: Profile, pool: str) -> None:
    """Before a worker on ``pool`` starts, the interpreter as ``chosen`` says, for the
    pools that run many tasks in one process (threads, gevent: what was measured): with a
    ``gc_threshold``, what the process loaded moves to the permanent generation
    (``gc.freeze``: never walked again) and the thresholds become it; with a
    ``switch_interval``, the GIL's (threads only). None: Python's defaults stay."""
    if pool not in ("threads", "gevent"):
        return
    if chosen.gc_threshold is not None:
        gc.collect()
        gc.freeze()
        gc.set_threshold(*chosen.gc_threshold)
    if chosen.switch_interval is not None and pool == "threads":
        sys.setswitchinterval(chosen.switch_interval)


#: What a gevent worker's process runs first (``python -c``): gevent patches the
#: standard library (sockets, threads, locks, ``threading.local``...) before any module
#: that uses it is imported, then :func:`green_main` starts the worker.
GREEN_BOOT = ("from gevent import monkey; monkey.patch_all(); "
              "from hypha_celery.cli.worker import green_main; green_main()")


def run_worker(hypha: Hypha, app_spec: str, chosen: Profile, pool: str,
               argv: Sequence[str]) -> None:
    """Start the worker of ``argv`` on ``pool``: tuned as ``chosen`` says, in this process;
    on gevent's pool in this process made anew (:func:`green`)."""
    if pool == "gevent":
        green(app_spec, chosen, argv)
        return
    tune(chosen, pool)
    hypha.celery.worker_main(list(argv))


def green(app_spec: str, chosen: Profile, argv: Sequence[str]) -> None:
    """Start the worker of ``argv`` (gevent's pool) in this process made anew, patched
    before anything is imported, as ``celery worker -P gevent`` does: patching a process
    that already imported the app would leave its locks and thread-locals real ones. The
    process is replaced (``os.execv``: the same pid, for a supervisor's signals); it loads
    the app again and runs ``argv`` with ``chosen``'s collector tuning (the only tuning
    gevent's pool takes)."""
    if importlib.util.find_spec("gevent") is None:
        raise SetupError("a worker on gevent's pool (the io profile's) needs gevent: pip "
                         "install 'hypha-celery[gevent]'")
    threshold = json.dumps(chosen.gc_threshold)
    replace_process([sys.executable, "-c", GREEN_BOOT, app_spec, threshold, *argv])


def replace_process(argv: list[str]) -> None:
    """``os.execv``: this process runs ``argv`` instead (never returns)."""
    os.execv(argv[0], argv)


def green_main() -> None:
    """The patched process of :func:`green`: ``sys.argv`` is ``-c APP GC_THRESHOLD
    ARGV...`` (the threshold as JSON: a list of three, or null)."""
    from hypha_celery.cli.loading import load_app

    app_spec, threshold, *argv = sys.argv[1:]
    told = json.loads(threshold)
    hypha = load_app(app_spec)
    tune(Profile("gevent", None, None, gc_threshold=tuple(told) if told else None), "gevent")
    hypha.celery.worker_main(argv)


def require_broker(hypha: Hypha) -> None:
    """A worker needs a broker: the embedded default has none (:class:`SetupError`)."""
    if hypha.settings.embedded:
        raise SetupError("hypha worker needs a broker: set HYPHA_BROKER_URL (e.g. "
                         "redis://127.0.0.1:6379/0); without one the embedded worker runs "
                         "inside the process that starts the run")


def worker_argv(
    hypha: Hypha, *, queues: Sequence[str] | None = None, pool: str | None = None,
    concurrency: int | None = None, loglevel: str = "INFO", extra: Sequence[str] = (),
    profile_name: str | Profile = "default",
) -> list[str]:
    """Arguments for ``hypha.celery.worker_main``: the profile's (a name, or one already
    resolved by :func:`profile`) pool, concurrency and queues (``default``: every queue of
    the app: coordinator, nodes, effects, agents, io and any node's own queue), task
    events on (``-E``) so Flower shows the tasks."""
    require_broker(hypha)
    chosen = profile_name if isinstance(profile_name, Profile) \
        else profile(hypha, profile_name)
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
    argv.extend(chosen.more_options())
    argv.extend(extra)
    return argv
