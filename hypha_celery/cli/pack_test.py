"""``hypha pack test PACK``: run a pack's evaluation and regression cases as real runs
(:func:`hypha_celery.packs.run_cases`), show them (a ``rich`` progress display while
they run, then a table), write JUnit XML on request and exit 1 when a case fails — a CI
step. Embedded by default (no server); on the broker of ``HYPHA_BROKER_URL`` (whose
workers must register the pack's graphs) when it is set, or on ``--app``'s.

A problem of the pack (a case naming a missing workflow, ...) is one error line per
problem and exit 1 before any run starts; no JUnit file is written then.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from hypha_celery.cli.common import principal
from hypha_celery.cli.loading import embedded_settings, load_app
from hypha_celery.client.hypha import Hypha
from hypha_celery.errors import PackError
from hypha_celery.packs import (
    DEFAULT_CASE_TIMEOUT,
    MAX_CASE_TIMEOUT,
    MAX_CASES,
    CaseKind,
    CaseResult,
    CaseStatus,
    DomainPack,
    PackCase,
    PackTestReport,
    compile_all,
    load_pack,
    run_cases,
    selected_cases,
    write_junit,
)

__all__ = ["report_table", "test_cmd"]

_STYLE = {CaseStatus.PASSED: "green", CaseStatus.FAILED: "red", CaseStatus.ERROR: "red"}


def _exit_with(lines: Sequence[str]) -> NoReturn:
    for line in lines:
        click.echo(f"hypha: error: {line}", err=True)
    click.get_current_context().exit(1)


def _checked(file: str, only: Sequence[str]) -> DomainPack:
    """The pack in ``file``, its graphs compiled and its cases selected: every problem is
    an error line (exit 1), before anything runs or is written."""
    try:
        pack = load_pack(file)
        compile_all(pack)
        selected_cases(pack, only)
    except PackError as exc:
        _exit_with([f"{file}: {p}: {m}" if p else f"{file}: {m}" for p, m in exc.problems])
    return pack


@contextmanager
def _host(pack: DomainPack, app_spec: str | None) -> Iterator[Hypha]:
    """``--app``'s Hypha, else the broker's (``HYPHA_BROKER_URL``), else the embedded
    default; the pack's graphs registered (a graph the app has already is kept)."""
    if app_spec:
        hypha = load_app(app_spec)
    elif os.environ.get("HYPHA_BROKER_URL", "").strip():
        hypha = Hypha.from_env()
    else:
        hypha = Hypha(embedded_settings())
    try:
        for graph_id, graph in compile_all(pack).items():
            if graph_id not in hypha.graphs:
                hypha.register(graph)
        yield hypha
    finally:
        hypha.close()


def report_table(report: PackTestReport) -> Table:
    """One row per case: kind, id, workflow, result, seconds, why (a failure's first
    checks, an error's reason)."""
    table = Table(title=f"pack {report.pack}", title_justify="left")
    table.add_column("kind")
    table.add_column("case", no_wrap=True)
    table.add_column("workflow")
    table.add_column("result", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for case in report.cases:
        table.add_row(case.kind.value, case.id, case.workflow,
                      f"[{_STYLE[case.status]}]{case.status.value}[/]",
                      f"{case.duration:.2f}s", case.message or _passed(case))
    return table


def _passed(case: CaseResult) -> str:
    return f"{len(case.checks)} checks passed"


def _verdict(report: PackTestReport) -> str:
    s = report.summary
    return (f"{report.pack}: {s['total']} cases, {s['passed']} passed, {s['failed']} failed, "
            f"{s['errors']} errors in {report.duration:.1f}s")


_HELP = f"""Run the evaluation and regression cases of the pack in PACK as real runs,
print a table and exit 1 when a case fails or errs (at most {MAX_CASES} cases per run).

Embedded by default (no server); with HYPHA_BROKER_URL set the runs go to that broker's
workers, which must register the pack's graphs. An evaluation case passes when its run
completes, meets its output contract and has a complete trace; a regression case compares
a run with its fixture (or with a first run of the same case)."""


@click.command("test", help=_HELP)
@click.argument("file", metavar="PACK", type=click.Path(dir_okay=False))
@click.option("--junit-xml", "junit", type=click.Path(dir_okay=False), metavar="PATH",
              help="write the results as JUnit XML (for CI), whole or not at all")
@click.option("--case", "only", multiple=True, metavar="ID",
              help="run only this case (repeatable; default: every case)")
@click.option("--timeout", type=click.FloatRange(0, MAX_CASE_TIMEOUT, min_open=True),
              default=DEFAULT_CASE_TIMEOUT, show_default=True,
              help=f"seconds one case's run may take (at most {MAX_CASE_TIMEOUT:g}); then it "
                   "is cancelled and the case is an error")
@click.option("--json", "as_json", is_flag=True, help="the report as one JSON object "
              "(instead of the table)")
@click.option("--app", "app_spec", metavar="MODULE:ATTR",
              help="run on this app (its broker and store) instead of the default")
def test_cmd(file: str, junit: str | None, only: tuple[str, ...], timeout: float,
             as_json: bool, app_spec: str | None) -> None:
    """``hypha pack test`` (its help: :data:`_HELP`)."""
    pack = _checked(file, only)
    err = Console(stderr=True)
    with _host(pack, app_spec) as hypha, _progress(err, len(selected_cases(pack, only))) as (
            progress, task):
        def started(kind: CaseKind, case: PackCase) -> None:
            progress.update(task, description=f"{kind.value} {case.id}")

        def done(result: CaseResult) -> None:
            progress.advance(task)

        report = run_cases(pack, hypha.as_principal(principal()), only=only, timeout=timeout,
                           base_dir=Path(file).parent, on_start=started, on_done=done)
    if junit is not None:
        try:
            write_junit(report, junit)
        except OSError as exc:
            _exit_with([f"cannot write {junit}: {exc.strerror or exc}"])
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        out = Console(width=max(Console().width, 120))
        out.print(report_table(report))
        click.echo(_verdict(report))
    if junit is not None:
        click.echo(f"wrote {junit}", err=True)
    if not report.passed:
        click.get_current_context().exit(1)


@contextmanager
def _progress(console: Console, total: int) -> Iterator[tuple[Progress, TaskID]]:
    """A progress display on stderr while the cases run (gone when they are done)."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        yield progress, progress.add_task("starting", total=total)
