"""``hypha sessions``: the newest sessions (who, which, the profile they opened with,
their runs, their status); ``hypha sessions show SESSION``: one session and its runs;
``hypha sessions close USER SESSION``: close it (``session.closed``; no run starts in it
after). Thin over :meth:`ScopedHypha.sessions` / :meth:`ScopedHypha.session` /
:meth:`ScopedHypha.close_session`; with ``--as-user``, that user's sessions only.
Metadata is shown by ``show`` only (``--json``)."""

from __future__ import annotations

from collections.abc import Sequence

import click

from hypha_celery.cli.common import aligned, app_option, echo_json, echo_line, iso, opened
from hypha_celery.cli.runs import runs_table
from hypha_celery.store import MAX_LIST, MAX_SESSIONS, RunFilter, SessionRow

__all__ = ["COMMANDS", "sessions_table"]

HEADER = ("USER", "SESSION", "STATUS", "PROFILE", "RUNS", "FIRST_RUN", "CREATED")


def sessions_table(rows: Sequence[SessionRow]) -> list[str]:
    """Aligned columns, a header first (times ISO UTC)."""
    cells = [HEADER, *((s.user_id or "-", s.session_id, s.status.value, _profile(s), str(s.runs),
                        s.first_run_id, iso(s.created_at)) for s in rows)]
    return aligned(cells)


def _profile(s: SessionRow) -> str:
    if s.profile is None:
        return "-"
    return f"{s.pack}:{s.profile}" if s.pack else s.profile


def _json(s: SessionRow, *, metadata: bool) -> dict[str, object]:
    out: dict[str, object] = {
        "user_id": s.user_id, "session_id": s.session_id, "profile": s.profile,
        "pack": s.pack, "runs": s.runs, "first_run_id": s.first_run_id,
        "created_at": s.created_at, "status": s.status.value, "closed_at": s.closed_at}
    if metadata:
        out["metadata"] = s.metadata
    return out


@click.group("sessions", invoke_without_command=True)
@click.option("--user", metavar="USER_ID", help="only sessions of this user")
@click.option("--limit", type=click.IntRange(1, MAX_SESSIONS), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="one JSON object a line")
@app_option()
@click.pass_context
def sessions_cmd(ctx: click.Context, user: str | None, limit: int, as_json: bool,
                 app_spec: str | None) -> None:
    """List sessions, newest first (a session opens with its first run)."""
    if ctx.invoked_subcommand is not None:
        return
    with opened(app_spec) as hypha:
        rows = hypha.sessions(user_id=user, limit=limit)
    if as_json:
        for s in rows:
            click.echo(echo_line(_json(s, metadata=False)))
        return
    if not rows:
        click.echo("no sessions", err=True)
        return
    for line in sessions_table(rows):
        click.echo(line)


@sessions_cmd.command("show")
@click.argument("session_id")
@click.option("--user", metavar="USER_ID", help="the session's user (an operator names "
              "it; with --as-user it is that user)")
@click.option("--json", "as_json", is_flag=True, help="the session, its metadata and runs")
@app_option()
def show_cmd(session_id: str, user: str | None, as_json: bool, app_spec: str | None) -> None:
    """One session: the profile it opened with, its metadata, its runs (newest first)."""
    with opened(app_spec) as hypha:
        row = hypha.session(session_id, user_id=user)
        if row is None:
            who = f" of user {user!r}" if user else ""
            raise click.ClickException(f"no session {session_id!r}{who}")
        runs = hypha.list_runs(RunFilter(user_id=row.user_id, session_id=session_id),
                               limit=MAX_LIST)
    runs = [r for r in runs if r.user_id == row.user_id]  # a NULL user matches none
    if as_json:
        echo_json({**_json(row, metadata=True), "run_ids": [r.run_id for r in runs]})
        return
    for line in sessions_table([row]):
        click.echo(line)
    click.echo("")
    for line in runs_table(runs):
        click.echo(line)


@sessions_cmd.command("close")
@click.argument("user_id", metavar="USER")
@click.argument("session_id", metavar="SESSION")
@click.option("--reason", help="recorded in session.closed")
@app_option()
def close_cmd(user_id: str, session_id: str, reason: str | None,
              app_spec: str | None) -> None:
    """Close a session: its status becomes closed, and a run started in it is refused.
    Closing a closed session changes nothing."""
    with opened(app_spec) as hypha:
        row = hypha.close_session(session_id, user_id=user_id, reason=reason)
    if row is None:
        raise click.ClickException(f"no session {session_id!r} of user {user_id!r}")
    click.echo(f"session {session_id} of {user_id}: {row.status.value}")


#: Registered on the ``hypha`` group by :mod:`hypha_celery.cli.main`.
COMMANDS: tuple[click.Command, ...] = (sessions_cmd,)
