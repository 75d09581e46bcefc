"""``hypha review list | approve | reject``: runs waiting for a person (a workflow state
with ``human_review``). Thin over :meth:`Hypha.reviews`, :meth:`Hypha.approve` and
:meth:`Hypha.reject`.

On the embedded default the decided run goes on in this process, so the process must
know its graph: give the pack it came from (``--pack FILE``) or the app (``--app``).
"""

from __future__ import annotations

import getpass
import time
from collections.abc import Iterator
from contextlib import contextmanager

import click

from hypha_celery.cli.common import app_option, echo_line, opened
from hypha_celery.cli.pack import opened_pack, show_outcome
from hypha_celery.cli.recovery import wait_if_embedded
from hypha_celery.client.scoped import ScopedHypha
from hypha_celery.packs import DomainPack

__all__ = ["COMMANDS", "review"]

_PACK_HELP = "the pack the run came from (its graphs are registered here first)"


def _default_reviewer() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment
        return "cli"


@contextmanager
def _app(pack_file: str | None, app_spec: str | None
         ) -> Iterator[tuple[ScopedHypha, DomainPack | None]]:
    if pack_file is None:
        with opened(app_spec) as hypha:
            yield hypha, None
    else:
        with opened_pack(pack_file, app_spec) as (hypha, pack):
            yield hypha, pack


def _resumable_here(hypha: ScopedHypha, run_id: str) -> None:
    """Embedded, this process runs the decided run: it must know the run's graph."""
    status = hypha.get_run(run_id).status()
    if (hypha.settings.embedded and status.status == "waiting_human"
            and status.graph_id not in hypha.graphs):
        raise click.UsageError(
            f"run {run_id} is a run of {status.graph_id!r}, which this process does not know, "
            "and it goes on here (no HYPHA_BROKER_URL): pass --pack FILE (or --app)")


@click.group()
def review() -> None:
    """Runs waiting for a person: list them, approve or reject their review."""


@review.command("list")
@app_option()
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line")
def review_list(app_spec: str | None, limit: int, as_json: bool) -> None:
    """List the pending reviews, oldest first (ids, reasons and subjects; no input)."""
    with opened(app_spec) as hypha:
        pending = hypha.reviews(limit)
    for r in pending:
        if as_json:
            click.echo(echo_line(r.to_json()))
            continue
        expires = (time.strftime("  expires %Y-%m-%dT%H:%M:%SZ", time.gmtime(r.expires_at))
                   if r.expires_at else "")
        click.echo(f"{r.run_id}  {r.graph_id}  review {r.review_id}  {r.reason or '-'}  "
                   f"{echo_line(r.subject) if r.subject is not None else '-'}{expires}")
    if not pending and not as_json:
        click.echo("no runs wait for a review", err=True)


@review.command("approve")
@click.argument("run_id")
@click.option("--by", default=_default_reviewer, show_default="your login name",
              help="who approves (recorded)")
@click.option("--note", default="", help="recorded with the approval")
@click.option("--pack", "pack_file", type=click.Path(dir_okay=False), metavar="FILE",
              help=_PACK_HELP)
@app_option()
def review_approve(run_id: str, by: str, note: str, pack_file: str | None,
                   app_spec: str | None) -> None:
    """Approve RUN_ID's pending review: the run goes on (embedded: here, until it ends
    or waits for a person again)."""
    with _app(pack_file, app_spec) as (hypha, pack):
        _resumable_here(hypha, run_id)
        review_id = hypha.approve(run_id, by=by, note=note)
        click.echo(f"approved review {review_id} of run {run_id}")
        if hypha.settings.embedded:
            wait_if_embedded(hypha, run_id)
            handle = hypha.get_run(run_id)
            show_outcome(hypha, pack, handle, handle.status().status,
                         f" --pack {pack_file}" if pack_file else "")


@review.command("reject")
@click.argument("run_id")
@click.option("--reason", required=True, help="why (recorded; a workflow ends "
              "run.failed, reason review_rejected)")
@click.option("--by", default=_default_reviewer, show_default="your login name",
              help="who rejects (recorded)")
@click.option("--pack", "pack_file", type=click.Path(dir_okay=False), metavar="FILE",
              help=_PACK_HELP)
@app_option()
def review_reject(run_id: str, reason: str, by: str, pack_file: str | None,
                  app_spec: str | None) -> None:
    """Reject RUN_ID's pending review (a workflow then ends failed, review_rejected)."""
    with _app(pack_file, app_spec) as (hypha, _):
        _resumable_here(hypha, run_id)
        review_id = hypha.reject(run_id, by=by, reason=reason)
        click.echo(f"rejected review {review_id} of run {run_id}")
        wait_if_embedded(hypha, run_id)


#: Registered on the ``hypha`` group by :mod:`hypha_celery.cli.main`.
COMMANDS: tuple[click.Command, ...] = (review,)
