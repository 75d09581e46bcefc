"""``hypha audit`` and ``hypha session``: hypha's projections of the event log.
Thin: read the events, fold them (:mod:`hypha_celery.projections`), print."""

from __future__ import annotations

import time

import click

from hypha_celery.cli.common import app_option, echo_json, opened
from hypha_celery.projections import (
    AuditDecision,
    AuditOutcome,
    AuditView,
    SessionView,
    ToolCall,
    stored_session,
)

__all__ = ["COMMANDS", "audit", "audit_lines", "session", "session_lines"]


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


def audit_lines(view: AuditView) -> list[str]:
    """Names, counts and reasons; tool outputs only in ``--json``."""
    c = view.counts
    return [
        f"run       {view.run_id}",
        f"graph     {view.graph_id or '-'}",
        f"status    {view.status}",
        f"path      {' -> '.join(view.state_path) or '-'}",
        f"decisions {len(view.decisions)}",
        *(_decision(d) for d in view.decisions),
        f"tools     {len(view.tool_calls)}",
        *(_tool(t) for t in view.tool_calls),
        f"models    {len(view.model_calls)}",
        *(f"  step {m.step_id or '-'}  {m.model or '-'}  {m.outcome}" for m in view.model_calls),
        f"policy    {len(view.policy_decisions)} events",
        f"failures  retries {c.retries}  redeliveries {c.redeliveries}  "
        f"dead letters {c.dead_letters}  recoveries {c.recoveries}  timeouts {c.timeouts}",
        *_cases(view),
        f"outcome   {_outcome(view.outcome)}",
    ]


def _cases(view: AuditView) -> list[str]:
    """A workflow's recovery cases and their cycles (none: no line)."""
    lines = [f"cases     {len(view.recovery_cases)}"] if view.recovery_cases else []
    for case in view.recovery_cases:
        done = f"  compensated {', '.join(case.compensated)}" if case.compensated else ""
        lines.append(f"  {case.case_id}  {case.state}/{case.node}  {case.status}"
                     f"{f' ({case.reason})' if case.reason else ''}{done}")
        lines += [f"    cycle {c.cycle}  {c.strategy} #{c.attempt} -> {c.target}  "
                  f"evidence {c.evidence}{'' if c.progress else ' (no progress)'}  {c.reason}"
                  for c in case.cycles]
    return lines


def _decision(d: AuditDecision) -> str:
    reducer = f" -> {d.reducer}" if d.reducer else ""
    return f"  step {d.step}  {d.type} {', '.join(d.node_ids)}".rstrip() + reducer


def _tool(t: ToolCall) -> str:
    error = t.error.get("type") if t.error else t.reason
    return f"  step {t.step_id or '-'}  {t.tool or '-'}  {t.outcome}" + (
        f"  {error}" if error else "")


def _outcome(outcome: AuditOutcome | None) -> str:
    if outcome is None:
        return "-"
    reason = f" ({outcome.reason})" if outcome.reason else ""
    return f"{outcome.status}{reason} at {_when(outcome.at)}"


def session_lines(view: SessionView) -> list[str]:
    counts = ", ".join(f"{k} {n}" for k, n in view.counts.model_dump().items() if n)
    return [
        f"session  {view.user_id} / {view.session_id}",
        f"status   {view.status}",
        f"runs     {len(view.runs)}" + (f" ({counts})" if counts else ""),
        f"first    {_when(view.first_activity)}",
        f"last     {_when(view.last_activity)}",
        *(f"  {r.run_id}  {r.status:<13} graph {r.graph_id or '-'}  created "
          f"{_when(r.created_at)}  ended {_when(r.ended_at)}" for r in view.runs),
    ]


@click.command()
@click.argument("run_id")
@app_option()
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object (with tool outputs; never input or state)")
def audit(run_id: str, app_spec: str | None, as_json: bool) -> None:
    """Show a run's audit: state path, decisions, tool and model calls, policy
    decisions, retries / dead letters / recoveries, outcome."""
    with opened(app_spec) as hypha:
        view = hypha.get_run(run_id).audit()
    if as_json:
        echo_json(view.model_dump(mode="json"))
        return
    for line in audit_lines(view):
        click.echo(line)


@click.command()
@click.argument("user_id")
@click.argument("session_id")
@app_option()
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
def session(user_id: str, session_id: str, app_spec: str | None, as_json: bool) -> None:
    """Show the runs of one (USER_ID, SESSION_ID), oldest first, and whether the
    session is active (a run queued, running or waiting for a human) or idle."""
    with opened(app_spec) as hypha:
        view = stored_session(hypha.store, user_id, session_id)
    if as_json:
        echo_json(view.model_dump(mode="json"))
        return
    if not view.runs:
        click.echo(f"no runs of user {user_id!r} in session {session_id!r}", err=True)
    for line in session_lines(view):
        click.echo(line)


COMMANDS = (audit, session)
