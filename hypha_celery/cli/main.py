"""The ``hypha`` command. Thin: parse, load the app, call the library, print."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

import click
import kombu.exceptions
import redis.exceptions

from hypha_celery import __version__
from hypha_celery.atomic import write_atomically
from hypha_celery.cli import (
    agents,
    bus,
    console,
    evaluate,
    mcp,
    memory,
    metrics,
    pack,
    recovery,
    rerun,
    review,
    runs,
    sessions,
    skill,
    views,
)
from hypha_celery.cli.common import AS_USER, app_option, echo_json, opened, operator_only
from hypha_celery.cli.follow import LiveLines
from hypha_celery.cli.follow import follow as follow_events
from hypha_celery.cli.loading import embedded_settings, load_app
from hypha_celery.cli.passthrough import PassThroughCommand, celery_worker
from hypha_celery.cli.progress import Progress, read_counts
from hypha_celery.cli.selection import parse_session, parse_since
from hypha_celery.cli.status import status_json, status_lines
from hypha_celery.cli.timeline import timeline, use_colour
from hypha_celery.cli.up import COMMANDS as UP_COMMANDS
from hypha_celery.cli.worker import (
    POOLS,
    PROFILES,
    parse_queues,
    profile,
    require_broker,
    run_worker,
    worker_argv,
)
from hypha_celery.client.hypha import Hypha
from hypha_celery.errors import HyphaError
from hypha_celery.events import Event
from hypha_celery.exchange import KEY_ENV, export_jsonl, export_key, import_file
from hypha_celery.jsontypes import JsonObject
from hypha_celery.live import LiveItem, run_topic
from hypha_celery.store import STORE_ERRORS, display_url, store_error

#: Failures of the user's making (configuration, input, unknown ids, unreachable
#: services): one line on stderr, no traceback. ``HYPHA_DEBUG=1`` shows it.
USER_ERRORS: tuple[type[BaseException], ...] = (
    HyphaError, *STORE_ERRORS, kombu.exceptions.OperationalError,
    redis.exceptions.ConnectionError, ConnectionError,
)


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"hypha: error: {' '.join(str(message).split())}", err=True)
    sys.exit(code)


def _usage_hint(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        return f" (see '{ctx.command_path} --help')"
    return ""


def _describe(exc: BaseException) -> str:
    if (reason := store_error(exc)) is not None:
        return f"event store unavailable: {reason}"
    if isinstance(exc, kombu.exceptions.OperationalError | ConnectionError):
        return f"broker unavailable: {exc}"
    if isinstance(exc, redis.exceptions.ConnectionError):
        return f"Redis unavailable: {exc}"
    return str(exc) or type(exc).__name__


class HyphaGroup(click.Group):
    """Turns every expected error into ``hypha: error: ...`` on one line: exit 2
    for usage errors, 1 otherwise, 130 on Ctrl-C."""

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        debug = bool(os.environ.get("HYPHA_DEBUG"))
        try:
            rv = super().main(args, prog_name or "hypha", complete_var,
                              standalone_mode=False, **extra)
        except click.Abort:
            sys.exit(130)
        except click.ClickException as exc:
            _fail(exc.format_message() + _usage_hint(exc), exc.exit_code)
        except USER_ERRORS as exc:
            if debug:
                raise
            _fail(_describe(exc), 1)
        code = rv if isinstance(rv, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code


def parse_input(value: str | None) -> Any:
    """``--input``: JSON text, or ``@FILE`` holding JSON."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        try:
            text = Path(value[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(f"cannot read {value[1:]}: {exc.strerror}",
                                     param_hint="'--input'") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON ({exc})", param_hint="'--input'") from None


def _meta(value: str | None) -> JsonObject | None:
    """``--session-meta``: a JSON object."""
    if value is None:
        return None
    try:
        meta = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON ({exc})", param_hint="'--session-meta'"
                                 ) from None
    if not isinstance(meta, dict):
        raise click.BadParameter("a JSON object", param_hint="'--session-meta'")
    return meta


def _as_user(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    ctx.meta[AS_USER] = value or None


@click.group(cls=HyphaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="hypha")
@click.option("--as-user", envvar="HYPHA_AS_USER", metavar="USER", expose_value=False,
              callback=_as_user, is_eager=True,
              help="act for this user: see, start and act on only that user's runs, "
              "sessions, agents, reviews and dead letters (default: the operator, trusted)")
def cli() -> None:
    """Durable graph agents on Celery.

    Configuration comes from HYPHA_BROKER_URL, HYPHA_RESULT_BACKEND and
    HYPHA_STORE_URL; with no broker everything runs embedded in this process
    (memory transport, SQLite store under ./.hypha/).
    """


@cli.command()
@click.option("--question", default=None, help="the question the demo agent answers")
def demo(question: str | None) -> None:
    """Run the demo graph (classify -> 3 lookups in parallel -> merge -> answer)
    embedded in this process; print the event timeline and the result."""
    from hypha_celery.demo import QUESTION, run_demo

    if os.environ.get("HYPHA_BROKER_URL", "").strip():
        click.echo("hypha: note: the demo runs embedded; HYPHA_BROKER_URL is ignored", err=True)
    hypha = Hypha(embedded_settings())
    try:
        run, result = run_demo(hypha, question or QUESTION)
        click.echo(f"run {run.id}  graph support  store "
                   f"{display_url(hypha.settings.store_url)}")
        for line in timeline(run.events(), colour=use_colour(sys.stdout)):
            click.echo(line)
        click.echo("result:")
        echo_json(result)
    finally:
        hypha.close()


@cli.command()
@click.argument("graph", required=False)
@app_option()
@click.option("--pack", "pack_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="run a workflow of this domain pack (no GRAPH; embedded unless --app)")
@click.option("--workflow", metavar="ID", help="with --pack: the workflow (default: the "
              "pack's default_workflow)")
@click.option("--input", "input_json", metavar="JSON", help="run input as JSON, or @FILE")
@click.option("--user-id", "--user", help="runs of one (user id, session id) go one at a time")
@click.option("--session-id", "--session")
@click.option("--session-profile", metavar="NAME", help="with --pack and --session: the "
              "pack's session profile the session opens with (its workflow, tool profile, "
              "policy, limits and metadata govern every run of the session)")
@click.option("--session-meta", metavar="JSON", help="with --session-profile: the session's "
              "metadata (a JSON object, over the profile's default_metadata)")
@click.option("--on-busy", type=click.Choice(["queue", "reject"]), default="queue",
              show_default=True, help="when the session already has an active run")
@click.option("--idempotency-key", help="a second start with this key returns the same run")
@click.option("--wait/--no-wait", default=False, show_default=True,
              help="wait for the result (the failure reason exits 1)")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="with --wait: give up waiting after this long (the run goes on)")
def run(graph: str | None, app_spec: str | None, pack_file: str | None, workflow: str | None,
        input_json: str | None, user_id: str | None, session_id: str | None,
        session_profile: str | None, session_meta: str | None, on_busy: str,
        idempotency_key: str | None, wait: bool, timeout: float | None) -> None:
    """Start a run of GRAPH (with --app) or of a pack's workflow (--pack FILE) and print
    its id (then, with --wait or embedded, its result, or the review it waits for)."""
    payload = parse_input(input_json)
    if pack_file is not None:
        if graph is not None:
            raise click.UsageError("give GRAPH or --pack FILE, not both (--workflow picks "
                                   "the pack's workflow)")
        return pack.run_pack(pack_file, workflow, app_spec, payload, wait=wait,
                             timeout=timeout, user_id=user_id, session_id=session_id,
                             on_busy=on_busy, idempotency_key=idempotency_key,
                             session_profile=session_profile,
                             session_meta=_meta(session_meta))
    if session_profile is not None or session_meta is not None:
        raise click.UsageError("--session-profile and --session-meta name a profile of "
                               "--pack FILE")
    if graph is None:
        raise click.UsageError("give GRAPH (with --app) or --pack FILE")
    if workflow is not None:
        raise click.UsageError("--workflow picks a workflow of --pack FILE")
    if app_spec is None:
        raise click.MissingParameter(param_type="option", param_hint="'--app'")
    with opened(app_spec) as hypha:
        handle = hypha.start(graph, payload, user_id=user_id, session_id=session_id,
                             on_busy=on_busy,  # type: ignore[arg-type]
                             idempotency_key=idempotency_key)
        click.echo(handle.id)
        if not wait and hypha.settings.embedded:
            click.echo("hypha: note: no HYPHA_BROKER_URL, the run executes in this process; "
                       "waiting for it", err=True)
            wait = True
        if wait:
            echo_json(handle.wait(timeout=timeout))


@cli.command()
@click.argument("run_id")
@app_option()
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
def status(run_id: str, app_spec: str | None, as_json: bool) -> None:
    """Show a run's status (never its input or state)."""
    with opened(app_spec) as hypha:
        st = hypha.get_run(run_id).status()
    if as_json:
        click.echo(status_json(st))
    else:
        for line in status_lines(st):
            click.echo(line)


@cli.command()
@click.argument("run_id")
@app_option()
@click.option("--follow", "-f", is_flag=True,
              help="keep printing new events until the run ends, and the tokens its model "
                   "calls stream meanwhile (when the app has a live bus)")
@click.option("--json", "as_json", is_flag=True,
              help="raw events, one JSON object a line (includes input and state); with "
                   "--follow also the live items (they have a \"kind\", events a \"type\")")
def events(run_id: str, app_spec: str | None, follow: bool, as_json: bool) -> None:
    """Print a run's events as a timeline."""
    with opened(app_spec) as hypha:
        handle = hypha.get_run(run_id)
        if not follow:
            _print_events(iter(handle.events()), as_json)
            return
        with hypha.live.subscribe(run_topic(run_id)) as live:
            _print_events(follow_events(hypha.store, run_id, live=live), as_json)


def _print_events(stream: Iterator[Event | LiveItem], as_json: bool) -> None:
    if as_json:
        for entry in stream:
            click.echo(entry.model_dump_json() if isinstance(entry, Event)
                       else json.dumps(entry, ensure_ascii=False))
        return
    lines = LiveLines(click.echo)

    def events_only() -> Iterator[Event]:
        for entry in stream:
            if isinstance(entry, Event):
                lines.close_line()
                yield entry
            else:
                lines.item(entry)
        lines.close_line()

    for line in timeline(events_only(), colour=use_colour(sys.stdout)):
        click.echo(line)


@cli.command()
@click.argument("run_id")
@app_option()
def cancel(run_id: str, app_spec: str | None) -> None:
    """Cancel a run (a result arriving later is recorded as late and ignored)."""
    with opened(app_spec) as hypha:
        if hypha.cancel(run_id):
            click.echo(f"cancelled {run_id}")
        else:
            st = hypha.get_run(run_id).status()
            click.echo(f"run {run_id} had already ended ({st.status}); nothing to cancel")


@cli.command()
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@click.option("--run", "run_opts", multiple=True, metavar="RUN_ID",
              help="a run to export (repeatable; the same as a RUN_ID argument)")
@click.option("--session", metavar="USER_ID:SESSION_ID",
              help="only the runs of this user's session")
@click.option("--since", metavar="TIME", help="only runs with activity at or after TIME: "
              "ISO 8601 (UTC unless it has an offset) or epoch seconds")
@click.option("--out", "-o", "--output", "output", type=click.Path(dir_okay=False),
              default="-", help="file to write (default: stdout)")
@click.option("--sign", is_flag=True, help=f"sign every line with HMAC-SHA-256 (the key: "
              f"${KEY_ENV}), with a signed header and a signed trailer of counts")
@app_option()
def export(run_ids: tuple[str, ...], run_opts: tuple[str, ...], session: str | None,
           since: str | None, output: str, sign: bool, app_spec: str | None) -> None:
    """Export runs' events as JSONL, one sealed envelope (with its checksum) per line.
    Every run when no run is named; --session and --since narrow the selection."""
    ids = [*run_ids, *run_opts] or None
    user_session, when = parse_session(session), parse_since(since)
    key = export_key() if sign else None
    with opened(app_spec) as hypha, Progress("export") as progress:
        if output == "-" and sys.stdout.isatty():
            progress.enabled = False  # the lines themselves go to the terminal

        def write(out: IO[str]) -> tuple[int, int]:
            return export_jsonl(hypha.store, out, ids, session=user_session, since=when,
                                key=key, progress=progress)

        runs, count = write(sys.stdout) if output == "-" else _write_file(output, write)
    click.echo(f"exported {count} events of {runs} runs", err=True)


def _write_file(path: str, write: Callable[[IO[str]], tuple[int, int]]) -> tuple[int, int]:
    """Write through a temporary file in the same directory: no half-written export."""
    try:
        return write_atomically(path, write)
    except OSError as exc:
        raise click.FileError(path, exc.strerror) from None


@cli.command("import")
@click.argument("file", metavar="FILE")
@click.option("--verify", is_flag=True, help=f"accept only a signed export whose every "
              f"line verifies with ${KEY_ENV} (refused without the key)")
@click.option("--allow-unsigned", is_flag=True, help=f"with ${KEY_ENV} set, accept an "
              "unsigned file too (refused by default: its lines prove nothing)")
@click.option("--json", "as_json", is_flag=True,
              help='the counts as one JSON object: {"runs", "events", "present"}')
@app_option()
def import_(file: str, verify: bool, allow_unsigned: bool, as_json: bool,
            app_spec: str | None) -> None:
    """Import a JSONL export (FILE, or - for stdin) in one transaction.

    The whole file is checked before anything is committed (JSON, event types,
    checksums, complete runs, and, when $HYPHA_EXPORT_KEY is set, the signatures: an
    unsigned file is then refused unless --allow-unsigned): a bad line imports nothing.
    Events the store already has are skipped, so importing twice adds nothing; a
    different event under the same id is refused."""
    operator_only("import")  # it writes runs of any user
    if verify and allow_unsigned:
        raise click.UsageError("--verify and --allow-unsigned contradict each other")
    with opened(app_spec) as hypha, Progress("import", read_counts(file)) as progress:
        done = import_file(hypha.store, file, verify=verify, allow_unsigned=allow_unsigned,
                           progress=progress)
    if as_json:
        click.echo(json.dumps({"runs": done.runs, "events": done.events,
                               "present": done.present}))
        return
    click.echo(f"imported {done.runs} runs ({done.events} events); {done.present} events "
               "already present, skipped" + ("" if done.events else " (nothing new)"))


@cli.command(cls=PassThroughCommand, celery=celery_worker,
             context_settings={"ignore_unknown_options": True,
                               "allow_interspersed_args": True})
@app_option(required=True)
@click.option("--queues", "-Q", metavar="Q1,Q2", help="queues to consume (default: all of the "
              "app's: coordinator, nodes, effects and nodes' own; never hypha.dead_letter)")
@click.option("--profile", "profile_name", default="default", show_default=True,
              metavar="|".join(PROFILES) + "|FILE.py", help="io: hypha.agents + hypha.io on "
              "1,000 greenlets (gevent); cpu: the other queues on prefork; default: every queue on "
              "prefork; or a profile file (workers/llm.py)")
@click.option("--pool", "-P", type=click.Choice(POOLS),
              help="overrides the profile's (default profile: prefork)")
@click.option("--concurrency", "-c", type=click.IntRange(min=1),
              help="worker processes / threads / greenlets (default: the profile's: CPU "
              "count, io: 1000)")
@click.option("--loglevel", "-l", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                                case_sensitive=False))
@click.option("--dry-run", "--check", "dry_run", is_flag=True,
              help="load the app, check the options and the profile, print the celery "
              "worker command line and exit")
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED, metavar="[CELERY OPTIONS]...")
def worker(app_spec: str, queues: str | None, profile_name: str, pool: str | None,
           concurrency: int | None, loglevel: str, dry_run: bool,
           celery_args: tuple[str, ...]) -> None:
    """Run a Celery worker for the app (task events on). Other options are passed
    to `celery worker`, e.g. --hostname (an option neither knows is refused)."""
    operator_only("a worker")
    hypha = load_app(app_spec)
    require_broker(hypha)
    chosen = profile(hypha, profile_name)  # resolved once (a profile file is run once)
    argv = worker_argv(hypha, queues=parse_queues(queues), pool=pool, concurrency=concurrency,
                       loglevel=loglevel.upper(), extra=celery_args, profile_name=chosen)
    if dry_run:
        click.echo(f"celery {shlex.join(argv)}")
        return
    run_worker(hypha, app_spec, chosen, pool or chosen.pool, argv)


for _command in (*recovery.COMMANDS, *agents.COMMANDS, *rerun.COMMANDS, *views.COMMANDS,
                 *evaluate.COMMANDS, *pack.COMMANDS, *review.COMMANDS, *runs.COMMANDS,
                 *sessions.COMMANDS, *mcp.COMMANDS, *bus.COMMANDS, *memory.COMMANDS,
                 *skill.COMMANDS, *metrics.COMMANDS, *console.COMMANDS, *UP_COMMANDS):
    cli.add_command(_command)


def main() -> None:
    """Console entry point (``hypha``)."""
    cli.main(prog_name="hypha")
