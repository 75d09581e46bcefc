"""``hypha up``: the deployment's topology as local processes, no Docker.

A private ``redis-server`` when none listens and one is installed, N workers per profile,
beat, Flower and the web console, each a child process in a session of its own with its
output in ``<logs>/<name>.log``. The console gets a fresh operator token in its
environment (``HYPHA_CONSOLE_TOKENS``, unless one is set) and ``hypha up`` prints the
sign-in link on its own output, never in a log. Ctrl-C (or SIGTERM) stops them all:
SIGTERM to every child's process group (Celery's warm shutdown), SIGKILL after the grace
period, the private Redis last. A child that exits on its own stops the rest and exits 1,
with its log's tail.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import click
from kombu.utils.url import maybe_sanitize_url

from hypha_celery.cli.common import operator_only
from hypha_celery.cli.worker import PROFILES, is_profile_file
from hypha_celery.errors import SetupError
from hypha_celery.store import EventStore

__all__ = ["COMMANDS", "Child", "Console", "Plan", "parse_workers", "plan", "up"]

#: Where ``hypha up`` keeps its SQLite store and beat's schedule (the working directory's).
STATE_DIR = Path(".hypha")
#: Profile files ``--workers NAME=N`` finds by name, and whose set is the default.
WORKERS_DIR = Path("workers")
#: The default without a ``workers/`` directory of profile files.
DEFAULT_WORKERS = (("cpu", 1), ("io", 1))
#: Lines of a dead child's log printed.
TAIL_LINES = 20
#: Who the console's sign-in link made by ``hypha up`` signs in as.
CONSOLE_PRINCIPAL = "admin:operator"
#: The console's settings from the environment: any of them set, ``hypha up`` makes no
#: token of its own.
CONSOLE_TOKEN_VARS = ("HYPHA_CONSOLE_TOKENS", "HYPHA_CONSOLE_TOKENS_FILE")


@dataclass(frozen=True)
class Child:
    """A process to run: its name (and log ``<name>.log``), its command line, whose
    first word is ``hypha``, ``celery`` or ``redis-server`` (resolved at start), and
    variables for it alone (not printed: the console's token)."""

    name: str
    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    def line(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class Console:
    """The console ``hypha up`` runs: where, and the sign-in link it prints (with the
    token it made, or None when the tokens come from the environment)."""

    port: int
    token: str | None = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def sign_in(self) -> str:
        if self.token is None:
            return (f"{self.url} (sign in with a token of "
                    f"{' / '.join(CONSOLE_TOKEN_VARS)})")
        return f"{self.url}/login?token={self.token}"


@dataclass
class Plan:
    """What ``hypha up`` runs: the private Redis (or None), the other children in start
    order, the environment they get on top of this one, and notes for the user."""

    redis: Child | None
    children: list[Child]
    env: dict[str, str]
    notes: list[str] = field(default_factory=list)
    console: Console | None = None

    def all(self) -> list[Child]:
        return ([self.redis] if self.redis else []) + self.children


def parse_workers(values: Sequence[str], workers_dir: Path = WORKERS_DIR) -> list[tuple[str, int]]:
    """``["cpu=2", "llm=1"]`` -> ``[("cpu", 2), ("workers/llm.py", 1)]``: a profile is one
    of :data:`PROFILES`, a profile file, or the name of a file in ``workers/``. None given:
    one of each file in ``workers/``, else :data:`DEFAULT_WORKERS`."""
    if not values:
        files = sorted(p for p in workers_dir.glob("*.py") if not p.name.startswith("_"))
        return [(str(p), 1) for p in files] or list(DEFAULT_WORKERS)
    out: list[tuple[str, int]] = []
    for value in values:
        name, sep, count = value.partition("=")
        name = name.strip()
        if not sep or not name or not count.strip().isdigit() or int(count) < 1:
            raise click.BadParameter(f"expected PROFILE=N with N >= 1, got {value!r}",
                                     param_hint="'--workers'")
        out.append((_profile(name, workers_dir), int(count)))
    return out


def _profile(name: str, workers_dir: Path) -> str:
    if name in PROFILES:
        return name
    if is_profile_file(name):
        if not Path(name).is_file():
            raise click.BadParameter(f"no profile file {name!r}", param_hint="'--workers'")
        return name
    if (workers_dir / f"{name}.py").is_file():
        return str(workers_dir / f"{name}.py")
    raise click.BadParameter(f"unknown profile {name!r}: one of {', '.join(PROFILES)}, a "
                             f"file (workers/llm.py) or a name in {workers_dir}/",
                             param_hint="'--workers'")


def _short(profile: str) -> str:
    return Path(profile).stem if is_profile_file(profile) else profile


def listening(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def plan(app: str, workers: Sequence[tuple[str, int]], *, beat: bool, flower: bool | None,
         flower_port: int, redis_port: int, concurrency: int | None, logs: Path,
         env: Mapping[str, str], console: bool | None = False,
         console_port: int = 8765) -> Plan:
    """The processes and their environment (nothing is started)."""
    extra: dict[str, str] = {}
    notes: list[str] = []
    redis = None
    if env.get("HYPHA_BROKER_URL", "").strip():
        notes.append(f"broker: HYPHA_BROKER_URL ({maybe_sanitize_url(env['HYPHA_BROKER_URL'])})")
    else:
        base = f"redis://127.0.0.1:{redis_port}"
        extra |= {"HYPHA_BROKER_URL": f"{base}/0", "HYPHA_RESULT_BACKEND": f"{base}/1"}
        if listening(redis_port):
            notes.append(f"broker: the Redis listening on 127.0.0.1:{redis_port} (db 0, "
                         "results db 1)")
        elif shutil.which("redis-server"):
            redis = Child("redis", ["redis-server", "--port", str(redis_port), "--bind",
                                    "127.0.0.1", "--save", "", "--appendonly", "no"])
            notes.append(f"broker: a private redis-server on 127.0.0.1:{redis_port}, no "
                         "persistence (db 0, results db 1)")
        else:
            raise SetupError(f"no broker: nothing listens on 127.0.0.1:{redis_port} and "
                             "redis-server is not installed; set HYPHA_BROKER_URL")
    if env.get("HYPHA_STORE_URL", "").strip():
        notes.append("store: HYPHA_STORE_URL")
    else:
        db = (STATE_DIR / "hypha.db").absolute()
        extra["HYPHA_STORE_URL"] = f"sqlite:///{db}"
        notes.append(f"store: SQLite {STATE_DIR / 'hypha.db'} (HYPHA_STORE_URL unset)")
    children: list[Child] = []
    for profile, count in workers:
        short = _short(profile)
        for i in range(1, count + 1):
            argv = ["hypha", "worker", "--app", app, "--profile", profile,
                    f"--hostname={short}-{i}@%h"]
            if concurrency is not None:
                argv.append(f"--concurrency={concurrency}")
            children.append(Child(f"worker-{short}-{i}", argv))
    if beat:
        children.append(Child("beat", ["hypha", "beat", "--app", app,
                                       f"--schedule={STATE_DIR / 'celerybeat-schedule'}"]))
    if flower is None:
        flower = _installed("flower")
        if not flower:
            notes.append("Flower: not installed (pip install 'hypha-celery[flower]'), skipped")
    if flower:
        module = env.get("CELERY_APP", "").strip() or app.partition(":")[0]
        children.append(Child("flower", ["celery", "-A", module, "flower",
                                         f"--port={flower_port}", "--address=127.0.0.1"]))
        notes.append(f"Flower: http://127.0.0.1:{flower_port}")
    the_console = _console(app, console, console_port, env, children, notes)
    notes.append(f"logs: {logs}/<name>.log")
    return Plan(redis, children, extra, notes, the_console)


def _console(app: str, wanted: bool | None, port: int, env: Mapping[str, str],
             children: list[Child], notes: list[str]) -> Console | None:
    """The console's child (added to ``children``), with a token of its own unless the
    environment has tokens; None when not wanted (or, by default, not installed)."""
    if wanted is None:
        wanted = all(_installed(m) for m in ("starlette", "jinja2", "uvicorn"))
        if not wanted:
            notes.append("console: not installed (pip install 'hypha-celery[console]'), "
                         "skipped")
    if not wanted:
        return None
    child_env = {}
    token = None
    if not any(env.get(name, "").strip() for name in CONSOLE_TOKEN_VARS):
        token = secrets.token_urlsafe(24)
        child_env["HYPHA_CONSOLE_TOKENS"] = f"{CONSOLE_PRINCIPAL}={token}"
    children.append(Child("console", ["hypha", "console", "--app", app, "--host",
                                      "127.0.0.1", f"--port={port}"], child_env))
    console = Console(port, token)
    notes.append(f"console: {console.url}" + (
        " (a sign-in link with a fresh operator token is printed once it listens)"
        if token else f" (tokens: {' / '.join(CONSOLE_TOKEN_VARS)})"))
    return console


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _executable(argv: list[str]) -> list[str]:
    if argv[0] == "celery":
        return [sys.executable, "-m", "celery", *argv[1:]]
    if argv[0] == "hypha":
        script = Path(sys.executable).with_name("hypha")
        found = str(script) if script.is_file() else shutil.which("hypha")
        if found:
            return [found, *argv[1:]]
        return [sys.executable, "-c", "from hypha_celery.cli import main; main()", *argv[1:]]
    return [shutil.which(argv[0]) or argv[0], *argv[1:]]


@dataclass
class Running:
    child: Child
    proc: subprocess.Popen[bytes]
    log: Path


def start(child: Child, logs: Path, env: Mapping[str, str]) -> Running:
    log = logs / f"{child.name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(_executable(child.argv), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env={**env, **child.env},
                                start_new_session=True)
    return Running(child, proc, log)


def stop(running: Sequence[Running], grace: float) -> None:
    """SIGTERM to each child's process group, SIGKILL to the groups still alive after
    ``grace`` seconds; reap them all."""
    for r in running:
        _signal_group(r.proc, signal.SIGTERM)
    end = time.monotonic() + grace
    for r in running:
        with suppress(subprocess.TimeoutExpired):
            r.proc.wait(max(0.0, end - time.monotonic()))
    for r in running:
        _signal_group(r.proc, signal.SIGKILL)  # the group: a prefork pool's children too
        r.proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        return []


@contextmanager
def stop_requested() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while in the block (the handlers restored after)."""
    event = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        event.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield event
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if listening(port):
            return True
        time.sleep(0.05)
    return False


def run(the_plan: Plan, logs: Path, grace: float, redis_port: int) -> int:
    """Start everything, print the table, wait for Ctrl-C or a child's death."""
    console = the_plan.console
    if console is not None and listening(console.port):
        raise SetupError(f"the console's port {console.port} is taken: choose another with "
                         "--console-port, or --no-console")
    logs.mkdir(parents=True, exist_ok=True)
    STATE_DIR.mkdir(exist_ok=True)
    env = {**os.environ, **the_plan.env}
    services: list[Running] = []
    running: list[Running] = []
    with stop_requested() as stopping:
        try:
            if the_plan.redis is not None:
                services.append(redis := start(the_plan.redis, logs, env))
                if not wait_port(redis_port, redis.proc):
                    _report_dead(redis, "did not listen")
                    return 1
            store = EventStore(env["HYPHA_STORE_URL"])
            try:
                store.migrate()  # once, before the workers would race to
            finally:
                store.dispose()
            for child in the_plan.children:
                running.append(start(child, logs, env))
            _table(services + running)
            click.echo("Ctrl-C stops them all")
            announce = console
            while not stopping.wait(0.2):
                if announce is not None and listening(announce.port):
                    click.echo(f"console: {announce.sign_in()}")
                    announce = None
                dead = [r for r in services + running if r.proc.poll() is not None]
                if dead:
                    for r in dead:
                        _report_dead(r, f"exited with code {r.proc.returncode}")
                    click.echo("stopping the rest", err=True)
                    return 1
            click.echo("stopping ...")
            return 0
        finally:
            stop(running, grace)
            stop(services, grace)
            if running or services:
                click.echo(f"stopped {len(running) + len(services)} processes")


def _report_dead(r: Running, what: str) -> None:
    click.echo(f"hypha up: {r.child.name} (pid {r.proc.pid}) {what}; the end of {r.log}:",
               err=True)
    for line in tail(r.log):
        click.echo(f"  {line}", err=True)


def _table(running: Sequence[Running]) -> None:
    width = max(len(r.child.name) for r in running)
    click.echo(f"{'NAME':<{width}}  {'PID':>7}  LOG")
    for r in running:
        click.echo(f"{r.child.name:<{width}}  {r.proc.pid:>7}  {r.log}")


@click.command(context_settings={"show_default": True})
@click.option("--app", "app_spec", envvar="HYPHA_APP", metavar="MODULE:ATTR", required=True,
              help="the Hypha object, e.g. examples.support:hypha (env HYPHA_APP)")
@click.option("--workers", "workers_opt", multiple=True, metavar="PROFILE=N",
              help="N workers of a profile (repeatable): default, io, cpu, a file "
              "(workers/llm.py) or a name in ./workers/ (llm)  [default: one of each file "
              "in ./workers/, else cpu=1 and io=1]")
@click.option("--concurrency", "-c", type=click.IntRange(min=1), default=None,
              help="processes / threads of every worker (default: each profile's)")
@click.option("--beat/--no-beat", default=True, help="run beat (the recovery supervisor)")
@click.option("--flower/--no-flower", default=None, show_default=False,
              help="run Flower (default: when installed)")
@click.option("--flower-port", type=click.IntRange(1, 65535), default=5555)
@click.option("--console/--no-console", "console", default=None, show_default=False,
              help="run the web console, hypha console, on 127.0.0.1 (default: when the "
              "console extra is installed)")
@click.option("--console-port", type=click.IntRange(1, 65535), default=8765)
@click.option("--redis-port", type=click.IntRange(1, 65535), default=6379,
              help="without HYPHA_BROKER_URL: the Redis to use, or to start when nothing "
              "listens there and redis-server is installed")
@click.option("--logs", type=click.Path(file_okay=False, path_type=Path),
              default=STATE_DIR / "logs", help="a log per process: <logs>/<name>.log")
@click.option("--grace", type=click.FloatRange(min=0), default=30.0, metavar="SECONDS",
              help="on stop: how long the workers may finish their tasks before SIGKILL")
@click.option("--dry-run", is_flag=True, help="print the commands, one a line, and exit")
def up(app_spec: str, workers_opt: tuple[str, ...], concurrency: int | None, beat: bool,
       flower: bool | None, flower_port: int, console: bool | None, console_port: int,
       redis_port: int, logs: Path, grace: float, dry_run: bool) -> int:
    """Run the deployment's processes on this machine, no Docker: a private
    redis-server when none listens (and it is installed), N workers per profile, beat,
    Flower and the web console, a log each. Try horizontal scaling here: --workers llm=3.

    Without HYPHA_STORE_URL the store is SQLite in ./.hypha/hypha.db. Without
    HYPHA_CONSOLE_TOKENS(_FILE) the console gets a fresh operator token and the sign-in
    link is printed here (not in its log). Ctrl-C stops them all.
    """
    operator_only("hypha up")  # its workers and beat act on the whole deployment
    workers = parse_workers(workers_opt)
    the_plan = plan(app_spec, workers, beat=beat, flower=flower, flower_port=flower_port,
                    redis_port=redis_port, concurrency=concurrency, logs=logs,
                    env=os.environ, console=console, console_port=console_port)
    if dry_run:
        for note in the_plan.notes:
            click.echo(f"hypha up: {note}", err=True)
        for name, value in sorted(the_plan.env.items()):
            click.echo(f"export {name}={shlex.quote(value)}")
        for child in the_plan.all():
            click.echo(child.line())
        return 0
    for note in the_plan.notes:
        click.echo(f"hypha up: {note}")
    return run(the_plan, logs, grace, redis_port)


COMMANDS: tuple[click.Command, ...] = (up,)
