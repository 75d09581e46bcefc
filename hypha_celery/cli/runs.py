"""``hypha runs``: list runs newest first, with the filters of the console (graph,
status, user, session, time), a page at a time (keyset paging: as fast on the last page
of 100,000 runs as on the first). Thin over :meth:`ScopedHypha.list_runs`."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import click

from hypha_celery.cli.common import AS_USER, aligned, app_option, echo_line, iso, opened
from hypha_celery.cli.selection import parse_since
from hypha_celery.events import RunStatus
from hypha_celery.store import MAX_LIST, RunFilter, RunRow

__all__ = ["COMMANDS", "parse_cursor", "runs_table"]

#: ``EVENTS`` is the run's event count (its last event's ``seq``: a step of a run writes
#: several events, so a 4-step run shows about 20), ``seq`` in ``--json``.
HEADER = ("RUN_ID", "GRAPH", "STATUS", "USER", "SESSION", "EVENTS", "CREATED", "UPDATED")


def parse_cursor(value: str | None) -> int | None:
    """``--before``: the cursor the page before ended with (a row's place, digits)."""
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or int(value) < 1 or len(value) > 19:
        raise click.BadParameter(f"{value!r} is not a cursor of 'hypha runs' (copy the "
                                 "one a listing ends with)", param_hint="'--before'")
    return int(value)


def _time(value: str | None, option: str) -> float | None:
    return parse_since(value, option)


def runs_table(rows: Sequence[RunRow]) -> list[str]:
    """Aligned columns, a header first (times ISO UTC)."""
    cells = [HEADER, *((r.run_id, r.graph_id, r.status, r.user_id or "-",
                        r.session_id or "-", str(r.seq), iso(r.created_at),
                        iso(r.updated_at)) for r in rows)]
    return aligned(cells)


def _next_command(ctx: click.Context, cursor: int) -> str:
    """The command line of the next page: this one's options, with ``--before``."""
    words = ["hypha"]
    user = ctx.find_root().meta.get(AS_USER)
    if user:
        words += ["--as-user", user]
    words += ["runs", "--before", str(cursor)]
    for param in ctx.command.params:
        name = param.name
        if name in ("before", "as_json", "app_spec") or not isinstance(param, click.Option):
            continue
        value = ctx.params.get(name)
        if value is None or value is False or value == param.default:
            continue
        words.append(param.opts[0])
        if not param.is_flag:
            words.append(str(value))
    return " ".join(shlex.quote(w) for w in words)


@click.command("runs")
@click.option("--graph", metavar="GRAPH_ID", help="only runs of this graph")
@click.option("--status", type=click.Choice([s.value for s in RunStatus]),
              help="only runs in this status")
@click.option("--user", metavar="USER_ID", help="only runs of this user")
@click.option("--session", metavar="SESSION_ID", help="only runs of this session")
@click.option("--since", metavar="TIME", help="only runs created at or after TIME: ISO 8601 "
              "(UTC unless it has an offset) or epoch seconds")
@click.option("--until", metavar="TIME", help="only runs created before TIME")
@click.option("--updated", is_flag=True, help="--since / --until compare the time of the "
              "run's last event, not its creation")
@click.option("--limit", type=click.IntRange(1, MAX_LIST), default=50, show_default=True,
              help="runs per page")
@click.option("--before", metavar="CURSOR", help="the next page: the cursor the page "
              "before ended with")
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line (with its "
              "\"cursor\"); never a run's input, state or result")
@app_option()
@click.pass_context
def runs_cmd(ctx: click.Context, graph: str | None, status: str | None, user: str | None,
             session: str | None, since: str | None, until: str | None, updated: bool,
             limit: int, before: str | None, as_json: bool, app_spec: str | None) -> None:
    """List runs, newest first: a page of --limit, then the command of the next page.
    With --as-user, that user's runs only."""
    start, end = _time(since, "--since"), _time(until, "--until")
    filters = RunFilter(graph_id=graph, status=status, user_id=user, session_id=session,
                        **({"updated_since": start, "updated_until": end} if updated
                           else {"created_since": start, "created_until": end}))
    cursor = parse_cursor(before)
    with opened(app_spec) as hypha:
        rows = hypha.list_runs(filters, limit=limit, before=cursor)
    if as_json:
        for r in rows:
            click.echo(echo_line({**r.as_dict(), "cursor": str(r.id)}))
        return
    if not rows:
        click.echo("no runs" + (" before that cursor" if cursor else ""), err=True)
        return
    for line in runs_table(rows):
        click.echo(line)
    if len(rows) == limit:
        click.echo(f"next: {_next_command(ctx, rows[-1].id)}")
    else:
        click.echo(f"{len(rows)} runs; no more")


#: Registered on the ``hypha`` group by :mod:`hypha_celery.cli.main`.
COMMANDS: tuple[click.Command, ...] = (runs_cmd,)
