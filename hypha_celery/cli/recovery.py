"""``hypha dlq``, ``hypha quarantine``, ``hypha sweep`` and ``hypha beat``: the
operator's side of failure handling. Thin: every command is one library call."""

from __future__ import annotations

import shlex
import time
from typing import Any

import click

from hypha_celery.cli.common import (
    app_option,
    echo_json,
    echo_line,
    load_app,
    opened,
    operator_only,
    settle,
)
from hypha_celery.cli.passthrough import PassThroughCommand, celery_beat
from hypha_celery.cli.progress import Ticker
from hypha_celery.runtime.core import SweepDecision


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else "-"


@click.group()
def dlq() -> None:
    """Dead letters: messages hypha gave up on (retries exhausted, delivery limit,
    malformed, recovery exhausted)."""


@dlq.command("list")
@app_option()
@click.option("--all", "show_all", is_flag=True, help="also records already redriven")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line (no arguments)")
def dlq_list(app_spec: str | None, show_all: bool, limit: int, as_json: bool) -> None:
    """List dead letters, newest first (never their arguments)."""
    with opened(app_spec) as hypha:
        records = hypha.store.dead_letters(status=None if show_all else "open", limit=limit)
    for r in records:
        row = {k: r[k] for k in ("id", "status", "reason", "error_class", "attempts", "task",
                                 "run_id", "execution_id", "created_at")}
        if as_json:
            click.echo(echo_line(row))
        else:
            click.echo(f"{r['id']:>6}  {_when(r['created_at'])}  {r['status']:<8} "
                       f"{r['reason']:<18} {r['error_class']:<10} x{r['attempts']:<3} "
                       f"{r['task']}  run {r['run_id'] or '-'}")
    if not records and not as_json:
        click.echo("no dead letters", err=True)


@dlq.command("show")
@click.argument("dead_letter_id", type=int)
@app_option()
def dlq_show(dead_letter_id: int, app_spec: str | None) -> None:
    """Show one dead letter, with the task's arguments (node input may be sensitive)."""
    with opened(app_spec) as hypha:
        record = hypha.store.dead_letter(dead_letter_id)
    if record is None:
        raise click.ClickException(f"no dead letter {dead_letter_id}")
    echo_json(record)


@dlq.command("redrive")
@click.argument("dead_letter_id", type=int)
@app_option(required=True)
def dlq_redrive(dead_letter_id: int, app_spec: str) -> None:
    """Re-enqueue a dead letter; a run parked on it continues."""
    with opened(app_spec) as hypha:
        record = hypha.store.dead_letter(dead_letter_id)
        published = hypha.redrive(dead_letter_id)
        click.echo(f"redriven dead letter {dead_letter_id} as {published}")
        if record and record["run_id"]:
            wait_if_embedded(hypha, record["run_id"])


def wait_if_embedded(hypha: Any, run_id: str) -> None:
    """Embedded, the run executes in this process: stay until it ends."""
    if hypha.settings.embedded:
        click.echo("hypha: note: no HYPHA_BROKER_URL, the run executes in this process; "
                   "waiting for it", err=True)
        click.echo(f"run {run_id} {settle(hypha.get_run(run_id))}")


@dlq.command("purge")
@click.argument("ids", type=int, nargs=-1, metavar="[ID]...")
@click.option("--all", "purge_all", is_flag=True, help="purge every open dead letter")
@app_option()
def dlq_purge(ids: tuple[int, ...], purge_all: bool, app_spec: str | None) -> None:
    """Delete open dead letters (the given IDs, or --all)."""
    if not ids and not purge_all:
        raise click.UsageError("give dead-letter IDs or --all")
    with opened(app_spec) as hypha:
        count = hypha.store.purge_dead_letters(list(ids) if ids else None)
    click.echo(f"purged {count} dead letters")


@click.group()
def quarantine() -> None:
    """Runs held for a human: an at-most-once node's worker died mid-call and its
    effect may or may not have happened."""


@quarantine.command("list")
@app_option()
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
def quarantine_list(app_spec: str | None, limit: int) -> None:
    """List quarantined runs."""
    with opened(app_spec) as hypha:
        views = [v for rid in hypha.store.run_ids(status="quarantined", limit=limit)
                 if (v := hypha.store.load(rid)) is not None]
    for v in views:
        q = v["quarantine"]
        node_id, attempt, reason = (q["node_id"], q["attempt"], q["reason"]) if q else (
            None, None, None)
        click.echo(f"{v['run_id']}  {v['graph_id']}.{node_id}  "
                   f"attempt {attempt}  {reason}  since {_when(v['updated_at'])}")
    if not views:
        click.echo("no quarantined runs", err=True)


@quarantine.command("release")
@click.argument("run_id")
@app_option(required=True)
def quarantine_release(run_id: str, app_spec: str) -> None:
    """You checked the effect did NOT happen: run the node again (next attempt)."""
    with opened(app_spec) as hypha:
        hypha.release(run_id)
        click.echo(f"released {run_id}: the node runs again")
        wait_if_embedded(hypha, run_id)


@quarantine.command("fail")
@click.argument("run_id")
@click.option("--message", default="failed by an operator", show_default=True)
@app_option(required=True)
def quarantine_fail(run_id: str, message: str, app_spec: str) -> None:
    """End a quarantined run run.failed (reason quarantined)."""
    with opened(app_spec) as hypha:
        hypha.fail_quarantined(run_id, message)
    click.echo(f"failed {run_id}")


@click.command()
@app_option(required=True)
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line")
def sweep(app_spec: str, as_json: bool) -> None:
    """Run one recovery-supervisor sweep now and print its decisions."""
    with opened(app_spec) as hypha, Ticker("sweep"):
        decisions = hypha.sweep()
    for d in decisions:
        click.echo(echo_line(d) if as_json else decision_line(d))
    if not as_json:
        click.echo(f"{len(decisions)} decisions", err=True)


def decision_line(d: SweepDecision) -> str:
    """A sweep decision as a line: the action, the run (or the agent), the execution id
    (or the request ref), why."""
    if "run_id" in d:
        target, extra = f"run {d['run_id'] or '-'}", d["execution_id"] or ""
    else:
        target, extra = f"agent {d['agent']}", d.get("ref", "")
    why = d.get("why")
    return f"{d['action']:<18} {target}  {extra}{f'  ({why})' if why else ''}"


@click.command(cls=PassThroughCommand, celery=celery_beat,
               context_settings={"ignore_unknown_options": True})
@app_option(required=True)
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@click.option("--dry-run", "--check", "dry_run", is_flag=True,
              help="load the app, check the options, print the celery beat command line "
              "and exit")
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED, metavar="[CELERY OPTIONS]...")
def beat(app_spec: str, loglevel: str, dry_run: bool, celery_args: tuple[str, ...]) -> None:
    """Run celery beat for the app: the recovery supervisor every HYPHA_SWEEP_INTERVAL
    seconds. Run exactly one per deployment. Other options are passed to `celery beat`
    (an option neither knows is refused)."""
    operator_only("beat")
    hypha = load_app(app_spec)
    argv = ["beat", f"--loglevel={loglevel.upper()}", *celery_args]
    if dry_run:
        click.echo(f"celery {shlex.join(argv)}")
        return
    hypha.celery.start(argv)


COMMANDS = (dlq, quarantine, sweep, beat)
