"""``hypha pack validate | show | test`` and ``hypha run --pack``: domain packs from the
command line. Thin: load (:mod:`hypha_celery.packs`), compile, register, start, print.

Every problem of a pack is one line (``FILE: path: message``), and the command exits 1.
Without ``--app`` a pack runs on the embedded default (SQLite store, in-process worker;
``HYPHA_STORE_URL`` is honoured), so ``hypha run --pack`` and ``hypha review approve
--pack`` in two processes share one store. With ``--app`` on a broker, the pack's graphs
are registered in this process only: the workers' app must register them too
(``hypha.register(compile_pack(load_pack(FILE)))``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import click

from hypha_celery.cli.common import echo_json, echo_line, principal, settle
from hypha_celery.cli.loading import embedded_settings, load_app
from hypha_celery.cli.pack_test import test_cmd
from hypha_celery.client.hypha import Hypha
from hypha_celery.client.run import RunHandle
from hypha_celery.client.scoped import ScopedHypha
from hypha_celery.client.sessions import SessionOpening
from hypha_celery.errors import PackError
from hypha_celery.events import TERMINAL_STATUSES
from hypha_celery.graph import Graph
from hypha_celery.jsontypes import JsonObject
from hypha_celery.packs import (
    DomainPack,
    SessionPlan,
    compile_all,
    load_pack,
    output_issues,
    plan_session,
    validate_input,
    workflow_of,
)
from hypha_celery.reviews import pending_for

__all__ = ["COMMANDS", "opened_pack", "run_pack", "show_lines"]

_FILE = click.Path(dir_okay=False)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _exit_with(lines: Sequence[str]) -> NoReturn:
    for line in lines:
        click.echo(f"hypha: error: {line}", err=True)
    click.get_current_context().exit(1)


def _lines(prefix: str, problems: Sequence[tuple[str, str]]) -> list[str]:
    return [f"{prefix}: {p}: {m}" if p else f"{prefix}: {m}" for p, m in problems]


def _loaded(file: str) -> tuple[DomainPack, dict[str, Graph]]:
    """The pack in ``file`` and its graphs; every problem is an error line (exit 1)."""
    try:
        pack = load_pack(file)
        return pack, compile_all(pack)
    except PackError as exc:
        _exit_with(_lines(file, exc.problems))


@contextmanager
def opened_pack(file: str, app_spec: str | None) -> Iterator[tuple[ScopedHypha, DomainPack]]:
    """The app (``--app``, else the embedded default) with every workflow of the pack in
    ``file`` registered (a graph the app already has is kept)."""
    pack, graphs = _loaded(file)
    if app_spec is None and os.environ.get("HYPHA_BROKER_URL", "").strip():
        click.echo("hypha: note: a pack runs embedded unless --app is given; "
                   "HYPHA_BROKER_URL is ignored", err=True)
    hypha = load_app(app_spec) if app_spec else Hypha(embedded_settings())
    try:
        for graph_id, graph in graphs.items():
            if graph_id not in hypha.graphs:
                hypha.register(graph)
        yield hypha.as_principal(principal()), pack
    finally:
        hypha.close()


def run_pack(file: str, workflow: str | None, app_spec: str | None, payload: Any, *,
             wait: bool, timeout: float | None, session_profile: str | None = None,
             session_meta: JsonObject | None = None, **start: Any) -> None:
    """``hypha run --pack``: check the input against the workflow's task schema, start
    the run (in its session, under the session's profile), then (embedded, or with
    --wait) print its result, or how to review it."""
    with opened_pack(file, app_spec) as (hypha, pack):
        plan = _session_plan(hypha, pack, workflow, session_profile, session_meta,
                             start.get("session_id"), start.get("user_id"))
        wf = pack.workflow(plan.workflow_id)
        try:
            validate_input(pack, wf.id, payload)
        except PackError as exc:
            _exit_with(_lines(f"--input does not match task schema {wf.task_schema!r}",
                              exc.problems))
        opening = SessionOpening(plan.profile, plan.pack, plan.metadata)
        handle = hypha.start(plan.graph_id, payload, **start,
                             session=opening if start.get("session_id") else None)
        click.echo(handle.id)
        if hypha.settings.embedded and not wait:
            click.echo("hypha: note: no HYPHA_BROKER_URL, the run executes in this process; "
                       "waiting for it", err=True)
        if hypha.settings.embedded or wait:
            status = settle(handle, timeout)
            show_outcome(hypha, pack, handle, status, _review_options(file, app_spec))


def _session_plan(hypha: ScopedHypha, pack: DomainPack, workflow: str | None,
                  profile: str | None, meta: JsonObject | None, session_id: str | None,
                  user_id: str | None) -> SessionPlan:
    """The run's plan: its workflow and, in a session, the session's profile (the one it
    opened with, or ``profile`` for a session this run opens)."""
    if session_id is None and (profile is not None or meta is not None):
        raise click.UsageError("--session-profile and --session-meta need --session")
    existing = hypha.session(session_id, user_id) if session_id else None
    if workflow is not None:
        try:
            pack.workflow(workflow)
        except KeyError as exc:
            raise click.BadParameter(str(exc.args[0]), param_hint="'--workflow'") from None
    try:
        return plan_session(pack, profile, workflow=workflow, metadata=meta,
                            opened=existing is not None,
                            opened_with=existing.profile if existing else None)
    except PackError as exc:
        _exit_with(_lines(f"session {session_id!r}", exc.problems))


def show_outcome(hypha: ScopedHypha, pack: DomainPack | None, handle: RunHandle, status: str,
                 review_options: str) -> None:
    """Print the result (checked against the workflow's output contract when the run is
    one of ``pack``'s), or the pending review and how to decide it; a failed run raises
    (one line, exit 1)."""
    if status == "waiting_human":
        for line in waiting_lines(hypha, handle.id, review_options):
            click.echo(line)
        return
    if status not in TERMINAL_STATUSES:  # parked, quarantined: held for an operator
        click.echo(f"run {handle.id} {status} (see: hypha status {handle.id})")
        return
    result = handle.wait()  # RunFailed / RunCancelled: the one-line error
    echo_json(result)
    workflow_id = None if pack is None else workflow_of(pack, handle.status().graph_id)
    if pack is None or workflow_id is None:
        return
    issues = output_issues(pack, workflow_id, result)
    if issues:
        contract = pack.workflow(workflow_id).output_contract
        _exit_with(_lines(f"run {handle.id} completed, but its output breaks output contract "
                          f"{contract!r}", issues))


def waiting_lines(hypha: ScopedHypha, run_id: str, review_options: str) -> list[str]:
    pending = pending_for(hypha.store, run_id)
    if pending is None:
        return [f"run {run_id} waiting_human"]
    subject = pending.subject if isinstance(pending.subject, dict) else {}
    move = f" ({subject['from']} -> {subject['to']})" if {"from", "to"} <= set(subject) else ""
    return [f"waiting_human: review {pending.review_id}: {pending.reason}{move}",
            f"approve: hypha review approve {run_id}{review_options}",
            f"reject:  hypha review reject {run_id} --reason TEXT{review_options}"]


def _review_options(file: str, app_spec: str | None) -> str:
    return (f" --app {app_spec}" if app_spec else "") + f" --pack {file}"


# -- hypha pack ---------------------------------------------------------------------------
@click.group("pack")
def pack_group() -> None:
    """Domain packs: a product declared as data (workflows, nodes, tools, policies,
    schemas) in one YAML or JSON file. Run one with `hypha run --pack FILE`."""


@pack_group.command("validate")
@click.argument("file", type=_FILE)
def validate_cmd(file: str) -> None:
    """Load FILE (and the packs it extends), check every reference, guard, workflow and
    schema, import its code; print every problem (FILE: path: message) and exit 1, or
    `ok ID@VERSION`."""
    try:
        pack = load_pack(file)
        compile_all(pack)
    except PackError as exc:
        for line in _lines(file, exc.problems):
            click.echo(line)
        click.get_current_context().exit(1)
    click.echo(f"ok {pack.ref}: {_plural(len(pack.workflows), 'workflow')}, "
               f"{_plural(len(pack.tools), 'tool')}")


@pack_group.command("show")
@click.argument("file", type=_FILE)
@click.option("--json", "as_json", is_flag=True,
              help="the whole pack as one JSON document (with the packs it extends applied)")
def show_cmd(file: str, as_json: bool) -> None:
    """Summarize the pack in FILE: workflows (states, refs), nodes, tools, profiles."""
    try:
        pack = load_pack(file)
    except PackError as exc:
        _exit_with(_lines(file, exc.problems))
    if as_json:
        echo_json(pack.to_doc())
        return
    for line in show_lines(pack):
        click.echo(line)


def show_lines(pack: DomainPack) -> list[str]:
    """What a pack declares, one line per entry."""
    lines = [f"pack      {pack.ref}  {pack.name}"]
    if pack.description:
        lines.append(f"          {pack.description}")
    default = pack.workflow().id
    for wf in pack.workflows:
        refs = {"input": wf.task_schema, "output": wf.output_contract,
                "tools": wf.tool_profile, "policy": wf.policy}
        lines.append(f"workflow  {wf.id}{' (default)' if wf.id == default else ''}  "
                     f"{_plural(len(wf.states), 'state')}, "
                     f"{_plural(len(wf.transitions), 'transition')}  "
                     + "  ".join(f"{k} {v}" for k, v in refs.items() if v))
        reviewed = [s.id for s in wf.states if s.human_review and s.human_review.required]
        if reviewed:
            lines.append(f"          human review on entering {', '.join(reviewed)}")
    for name, node in pack.nodes.items():
        what = node.code or (f"{node.tool} -> {node.output_to or 'tool_result'}"
                             if node.tool else ", ".join(node.set_ or {}))
        lines.append(f"node      {name}  {node.kind}  {what}")
    for tool in pack.tools:
        how = f"handler {tool.handler}" if tool.handler else "mock"
        review = "  human review" if tool.spec.human_review else ""
        lines.append(f"tool      {tool.id}  {tool.spec.side_effect}{review}  {how}")
    lines += [f"profile   {k}  {', '.join(v)}" for k, v in pack.tool_profiles.items()]
    lines += [f"policy    {p.id}  {_plural(len(p.rules), 'rule')}, default {p.default_effect}"
              for p in pack.policies]
    lines.append(f"schemas   input: {', '.join(pack.task_schemas) or '-'}; "
                 f"output: {', '.join(pack.output_contracts) or '-'}")
    lines += [f"session   {k}  {echo_line(v.default_metadata)}"
              for k, v in pack.session_profiles.items()]
    lines.append(f"cases     {_plural(len(pack.evaluation_cases), 'evaluation case')}, "
                 f"{_plural(len(pack.regression_cases), 'regression case')}")
    return lines


pack_group.add_command(test_cmd)

#: Registered on the ``hypha`` group by :mod:`hypha_celery.cli.main`.
COMMANDS: tuple[click.Command, ...] = (pack_group,)
