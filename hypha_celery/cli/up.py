"""``hypha up``: the deployment's topology as local processes, no Docker.

A private ``redis-server`` when none listens and one is installed, N workers per profile,
beat, Flower and the web console, each a child process in a session of its own with its
output in ``<logs>/<name>.log``. The console gets a fresh operator token in its
environment (``HYPHA_CONSOLE_TOKENS``, unless one is set) and ``hypha up`` prints the
sign-in link on its own output, never in a log. With ``--metrics-port BASE``
(``HYPHA_METRICS_PORT``) worker *i* (from 0, in start order) serves its metrics on
``BASE + i``. Ctrl-C (or SIGTERM) stops them all: SIGTERM to every child's process group
(Celery's warm shutdown), SIGKILL after the grace period, the private Redis last.

A child that dies is restarted by :class:`~hypha_celery.fleet.RestartPolicy` (a line
says so): after 1 s, doubling for each restart of that child within 10 minutes, at most
30 s; its sixth death within 10 minutes (``--max-restarts``) stops the rest and exits 1
with its log's tail, as any death does with ``--exit-on-failure`` (and the private
Redis's always). The supervision is :mod:`hypha_celery.fleet`'s; this module plans the
processes, parses the options and prints.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click
from kombu.utils.url import maybe_sanitize_url

from hypha_celery.cli.common import operator_only
from hypha_celery.cli.worker import PROFILES, is_profile_file
from hypha_celery.errors import SetupError
from hypha_celery.fleet import (
    DEFAULT_RESTARTS,
    Child,
    Exited,
    Fleet,
    GaveUp,
    Notice,
    Restarted,
    Restarting,
    RestartPolicy,
    Running,
    exit_reason,
    listening,
    stop_requested,
    supervise,
    tail,
    wait_port,
)
from hypha_celery.metrics._exporter import PORT_ENV
from hypha_celery.store import EventStore

__all__ = ["COMMANDS", "Child", "Console", "Plan", "parse_workers", "plan", "up"]

#: Where ``hypha up`` keeps its SQLite store and beat's schedule (the working directory's).
STATE_DIR = Path(".hypha")
#: Profile files ``--workers NAME=N`` finds by name, and whose set is the default.
WORKERS_DIR = Path("workers")
#: The default without a ``workers/`` directory of profile files.
DEFAULT_WORKERS = (("cpu", 1), ("io", 1))
#: Who the console's sign-in link made by ``hypha up`` signs in as.
CONSOLE_PRINCIPAL = "admin:operator"
#: The console's settings from the environment: any of them set, ``hypha up`` makes no
#: token of its own.
CONSOLE_TOKEN_VARS = ("HYPHA_CONSOLE_TOKENS", "HYPHA_CONSOLE_TOKENS_FILE")


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
    #: The workers' metrics ports by name (``--metrics-port``).
    metrics: dict[str, int] = field(default_factory=dict)

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


def plan(app: str, workers: Sequence[tuple[str, int]], *, beat: bool, flower: bool | None,
         flower_port: int, redis_port: int, concurrency: int | None, logs: Path,
         env: Mapping[str, str], console: bool | None = False,
         console_port: int = 8765, metrics_port: int | None = None) -> Plan:
    """The processes and their environment (nothing is started). With ``metrics_port``
    worker *i* (from 0) gets ``HYPHA_METRICS_PORT=metrics_port + i`` and the other
    children none (an empty one)."""
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
                                    "127.0.0.1", "--save", "", "--appendonly", "no"],
                          restart=False)  # its data went with it: stop them all
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
    children = _workers(app, workers, concurrency)
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
    ports: dict[str, int] = {}
    if metrics_port is not None:
        children, ports = _metrics_ports(children, metrics_port)
        notes.append("metrics: " + ", ".join(f"{name} on :{port}"
                                             for name, port in ports.items()))
    notes.append(f"logs: {logs}/<name>.log")
    return Plan(redis, children, extra, notes, the_console, ports)


def _workers(app: str, workers: Sequence[tuple[str, int]],
             concurrency: int | None) -> list[Child]:
    children: list[Child] = []
    for profile, count in workers:
        short = _short(profile)
        for i in range(1, count + 1):
            argv = ["hypha", "worker", "--app", app, "--profile", profile,
                    f"--hostname={short}-{i}@%h"]
            if concurrency is not None:
                argv.append(f"--concurrency={concurrency}")
            children.append(Child(f"worker-{short}-{i}", argv))
    return children


def _metrics_ports(children: list[Child], base: int) -> tuple[list[Child], dict[str, int]]:
    """``children`` with ``HYPHA_METRICS_PORT``: ``base + i`` for worker *i*, empty (no
    metrics server) for the others; the workers' ports by name."""
    workers = [c for c in children if c.argv[:2] == ["hypha", "worker"]]
    if base + len(workers) - 1 > 65535:
        raise SetupError(f"--metrics-port {base}: {len(workers)} workers need ports up to "
                         f"{base + len(workers) - 1}, past 65535")
    ports = {c.name: base + i for i, c in enumerate(workers)}
    return [dataclasses.replace(c, shown={PORT_ENV: str(ports[c.name]) if c.name in ports
                                          else ""}) for c in children], ports


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


def run(the_plan: Plan, logs: Path, grace: float, redis_port: int,
        policy: RestartPolicy | None) -> int:
    """Start everything, print the table, keep the children running (``policy``; None:
    the first death stops them all) until Ctrl-C or a death not restarted."""
    _check_ports(the_plan)
    logs.mkdir(parents=True, exist_ok=True)
    STATE_DIR.mkdir(exist_ok=True)
    env = {**os.environ, **the_plan.env}
    services = Fleet(logs, env, _say, policy=None)  # the private Redis: stopped last
    fleet = Fleet(logs, env, _say, policy=policy)
    with stop_requested() as stopping:
        try:
            if the_plan.redis is not None:
                redis = services.start(the_plan.redis)
                if not wait_port(redis_port, redis.proc):
                    _report_dead(redis, "did not listen")
                    return 1
            store = EventStore(env["HYPHA_STORE_URL"])
            try:
                store.migrate()  # once, before the workers would race to
            finally:
                store.dispose()
            for child in the_plan.children:
                fleet.start(child)
            _table(services.running + fleet.running, the_plan.metrics)
            click.echo("Ctrl-C stops them all" + (
                "" if policy is None else f"; a process that dies is restarted (at most "
                f"{policy.limit} times within {_span(policy.window)})"))
            code = supervise([services, fleet], stopping,
                             tick=_announcer(the_plan.console))
            click.echo("stopping the rest" if code else "stopping ...", err=bool(code))
            return code
        finally:
            stopped = fleet.stop(grace) + services.stop(grace)
            if stopped:
                click.echo(f"stopped {stopped} processes")


def _check_ports(the_plan: Plan) -> None:
    console = the_plan.console
    if console is not None and listening(console.port):
        raise SetupError(f"the console's port {console.port} is taken: choose another with "
                         "--console-port, or --no-console")
    for name, port in the_plan.metrics.items():
        if listening(port):
            raise SetupError(f"the metrics port {port} of {name} is taken: choose another "
                             "base with --metrics-port")


def _announcer(console: Console | None) -> Callable[[], None]:
    """Prints the console's sign-in link once it listens."""
    pending = [console] if console is not None else []

    def tick() -> None:
        if pending and listening(pending[0].port):
            click.echo(f"console: {pending.pop().sign_in()}")

    return tick


def _span(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _say(notice: Notice) -> None:
    """One line per death and per restart (and a log's tail when it stops them all)."""
    name = notice.child.name
    if isinstance(notice, Restarting):
        click.echo(f"hypha up: {name} (pid {notice.pid}) {exit_reason(notice.returncode)}; "
                   f"restarting it in {notice.delay:g} s (restart {notice.number} of at most "
                   f"{notice.limit} within {_span(notice.window)})", err=True)
    elif isinstance(notice, Restarted):
        click.echo(f"hypha up: {name} restarted (pid {notice.pid})", err=True)
    elif isinstance(notice, GaveUp):
        _report(name, notice.pid, f"{exit_reason(notice.returncode)} after {notice.limit} "
                f"restarts within {_span(notice.window)}: not restarted", notice.log)
    elif isinstance(notice, Exited):
        _report(name, notice.pid, exit_reason(notice.returncode), notice.log)


def _report_dead(r: Running, what: str) -> None:
    _report(r.child.name, r.proc.pid, what, r.log)


def _report(name: str, pid: int, what: str, log: Path) -> None:
    click.echo(f"hypha up: {name} (pid {pid}) {what}; the end of {log}:", err=True)
    for line in tail(log):
        click.echo(f"  {line}", err=True)


def _table(running: Sequence[Running], metrics: Mapping[str, int]) -> None:
    width = max(len(r.child.name) for r in running)
    extra = "  METRICS" if metrics else ""
    click.echo(f"{'NAME':<{width}}  {'PID':>7}  LOG" + extra)
    for r in running:
        port = metrics.get(r.child.name)
        column = f"  :{port}" if port else ("  -" if metrics else "")
        click.echo(f"{r.child.name:<{width}}  {r.proc.pid:>7}  {r.log}{column}")


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
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              envvar=PORT_ENV, metavar="BASE", help="worker i (from 0) serves its metrics "
              f"on BASE + i (its {PORT_ENV}); default: none (env {PORT_ENV})")
@click.option("--max-restarts", type=click.IntRange(min=0), default=DEFAULT_RESTARTS.limit,
              help="restarts of one process within "
              f"{_span(DEFAULT_RESTARTS.window)}; one more death stops them all (exit 1)")
@click.option("--restart-backoff", type=click.FloatRange(min=0),
              default=DEFAULT_RESTARTS.backoff, metavar="SECONDS",
              help="the wait before restarting a process that died, doubled for each of its "
              f"restarts within {_span(DEFAULT_RESTARTS.window)}, at most "
              f"{DEFAULT_RESTARTS.max_backoff:g} s")
@click.option("--exit-on-failure", is_flag=True,
              help="no restarts: a process that dies stops them all (exit 1)")
@click.option("--dry-run", is_flag=True, help="print the commands, one a line, and exit")
def up(app_spec: str, workers_opt: tuple[str, ...], concurrency: int | None, beat: bool,
       flower: bool | None, flower_port: int, console: bool | None, console_port: int,
       redis_port: int, logs: Path, grace: float, metrics_port: int | None,
       max_restarts: int, restart_backoff: float, exit_on_failure: bool,
       dry_run: bool) -> int:
    """Run the deployment's processes on this machine, no Docker: a private
    redis-server when none listens (and it is installed), N workers per profile, beat,
    Flower and the web console, a log each. Try horizontal scaling here: --workers llm=3.

    Without HYPHA_STORE_URL the store is SQLite in ./.hypha/hypha.db. Without
    HYPHA_CONSOLE_TOKENS(_FILE) the console gets a fresh operator token and the sign-in
    link is printed here (not in its log). A process that dies is restarted (a line says
    so), up to --max-restarts; Ctrl-C stops them all.
    """
    operator_only("hypha up")  # its workers and beat act on the whole deployment
    workers = parse_workers(workers_opt)
    the_plan = plan(app_spec, workers, beat=beat, flower=flower, flower_port=flower_port,
                    redis_port=redis_port, concurrency=concurrency, logs=logs,
                    env=os.environ, console=console, console_port=console_port,
                    metrics_port=metrics_port)
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
    policy = None if exit_on_failure else dataclasses.replace(
        DEFAULT_RESTARTS, limit=max_restarts, backoff=restart_backoff,
        max_backoff=max(DEFAULT_RESTARTS.max_backoff, restart_backoff))
    return run(the_plan, logs, grace, redis_port, policy)


COMMANDS: tuple[click.Command, ...] = (up,)
