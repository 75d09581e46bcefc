"""``hypha capture``, ``hypha compare``, ``hypha eval`` and ``hypha regress``: replay
fixtures, deterministic evaluation and regression over recorded runs. Thin: each command
is one library call (:mod:`hypha_celery.replay`, :mod:`hypha_celery.evaluation`); a
failed comparison, evaluation or regression exits 1, so they fit a CI job."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
from pydantic import ValidationError

from hypha_celery.cli.common import app_option, opened
from hypha_celery.cli.progress import Ticker
from hypha_celery.errors import RunNotFound
from hypha_celery.evaluation import (
    EvaluationSummary,
    OutputContract,
    RegressionReport,
    RegressionSpec,
    TraceSpec,
    evaluate_run,
    run_regression,
)
from hypha_celery.events.envelope import KINDS
from hypha_celery.replay import (
    FAMILIES,
    ReplayFixture,
    ReplaySpec,
    TraceDiff,
    capture_run,
    compare,
    read_fixture,
    write_fixture,
)
from hypha_celery.replay._compare import describe

_FILE = click.Path(exists=True, dir_okay=False)


def _read_json(path: str, hint: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint=hint) from None
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{path} is not valid JSON ({exc})", param_hint=hint) from None


def _replay_spec(path: str | None) -> ReplaySpec | None:
    if path is None:
        return None
    try:
        return ReplaySpec.model_validate(_read_json(path, "'--spec'"))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise click.BadParameter(f"{path} is not a replay spec ({where}: {first['msg']})"
                                 if where else f"{path} is not a replay spec ({first['msg']})",
                                 param_hint="'--spec'") from None


def _contract(path: str) -> OutputContract:
    """The contract in ``path``; its id is the file name without ``.json``."""
    name = Path(path).name
    return OutputContract(name.removesuffix(".json") or name, _read_json(path, "'--contract'"))


def _exit(code: int) -> NoReturn:
    click.get_current_context().exit(code)


def _run_events_exist(events: Sequence[object], run_id: str) -> None:
    if not events:
        raise RunNotFound(f"no run {run_id!r} in the event store")


@click.command("capture")
@click.argument("run_id")
@click.option("--out", "-o", "out", required=True, type=click.Path(dir_okay=False),
              help="the fixture file to write (pretty JSON)")
@click.option("--spec", "spec_file", type=_FILE, metavar="SPEC.json",
              help="a ReplaySpec as JSON (default: capture everything, state path)")
@click.option("--contract", "contract_file", type=_FILE, metavar="SCHEMA.json",
              help="a JSON Schema the output must satisfy, kept in the fixture")
@click.option("--id", "fixture_id", help="the fixture id (default: the run id)")
@app_option()
def capture_cmd(run_id: str, out: str, spec_file: str | None, contract_file: str | None,
                fixture_id: str | None, app_spec: str | None) -> None:
    """Capture RUN_ID's events as a replay fixture file (records replay.started /
    replay.completed in the run's log). The fixture holds the run's input and outputs."""
    spec = _replay_spec(spec_file)
    contract = _read_json(contract_file, "'--contract'") if contract_file else None

    def save(fixture: ReplayFixture) -> None:
        try:
            write_fixture(fixture, out)
        except OSError as exc:
            raise click.FileError(out, exc.strerror) from None

    with opened(app_spec) as hypha:
        fixture = capture_run(hypha.store, run_id, spec, fixture_id=fixture_id,
                              output_contract=contract, save=save)
    path = " -> ".join(fixture.state_path) or "(not captured)"
    click.echo(f"captured run {run_id} as fixture {fixture.id}: {len(fixture.events)} events, "
               f"state path {path}")
    click.echo(f"wrote {out}")


def diff_lines(diff: TraceDiff) -> list[str]:
    """One line per family (``ok`` or ``DIFFERS`` and how), then a verdict."""
    lines = []
    for name in FAMILIES:
        family = diff.family(name)
        lines.append(f"{name:<21}{'ok' if family.passed else 'DIFFERS'}"
                     + (f"  {describe(family)}" if not family.passed else ""))
    failed = diff.failed()
    verdict = (f"{len(failed)} of {len(FAMILIES)} families differ" if failed
               else "no differences")
    lines.append(f"fixture {diff.fixture_id} (run {diff.expected_run_id}) vs run "
                 f"{diff.actual_run_id}: {verdict}")
    return lines


@click.command("compare")
@click.argument("fixture_file", metavar="FIXTURE", type=_FILE)
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="the whole diff as one JSON object")
@click.option("--same-run", is_flag=True,
              help="fail unless RUN_ID is the run the fixture was captured from")
@app_option()
def compare_cmd(fixture_file: str, run_id: str, as_json: bool, same_run: bool,
                app_spec: str | None) -> None:
    """Compare RUN_ID's events with a replay FIXTURE, family by family (event types, state
    path, tool / model calls, policy decisions, memory reads, output). Exits 1 when they
    differ. Reads only: nothing is re-run or recorded."""
    fixture = read_fixture(fixture_file)
    with opened(app_spec) as hypha:
        events = hypha.store.events(run_id)
    _run_events_exist(events, run_id)
    diff = compare(fixture, events, check_run_id=same_run)
    if as_json:
        click.echo(diff.model_dump_json(indent=2))
    else:
        for line in diff_lines(diff):
            click.echo(line)
    if not diff.passed:
        _exit(1)


def summary_lines(summary: EvaluationSummary) -> list[str]:
    rows = [(r.id, c.id, "pass" if c.passed else "FAIL", c.message)
            for r in summary.results for c in r.checks]
    lines = _table(("result", "check", "result", "detail"), rows)
    lines.append(f"{summary.status} (score {summary.score:.2f}, {len(summary.results)} "
                 "results)")
    return lines


@click.command("eval")
@click.argument("run_id")
@click.option("--contract", "contract_files", type=_FILE, multiple=True,
              metavar="SCHEMA.json", help="a JSON Schema the run's output must satisfy "
              "(repeatable; its id is the file name)")
@click.option("--require", "required", multiple=True, metavar="TYPE",
              help="an event type the trace must hold (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="the summary as one JSON object")
@app_option()
def eval_cmd(run_id: str, contract_files: tuple[str, ...], required: tuple[str, ...],
             as_json: bool, app_spec: str | None) -> None:
    """Evaluate RUN_ID deterministically: output contracts and trace completeness (required
    types, a terminal run event, closed lifecycle pairs). Records eval.started /
    eval.completed in the run's log; exits 1 when a check fails."""
    unknown = [t for t in required if t not in KINDS]
    if unknown:
        raise click.BadParameter(f"unknown event type {unknown[0]!r}", param_hint="'--require'")
    contracts = [_contract(path) for path in contract_files]
    with opened(app_spec) as hypha:
        summary = evaluate_run(hypha.store, run_id, contracts=contracts,
                               traces=[TraceSpec(event_types=list(required))])
    if as_json:
        click.echo(summary.model_dump_json(indent=2))
    else:
        for line in summary_lines(summary):
            click.echo(line)
    if not summary.passed:
        _exit(1)


def report_lines(report: RegressionReport) -> list[str]:
    rows = [(case.id, c.id.removeprefix("regression."), "pass" if c.passed else "FAIL",
             c.message) for case in report.cases for c in case.checks]
    lines = _table(("case", "check", "result", "detail"), rows)
    s = report.summary
    lines.append(f"regression {report.spec_id}: {s['total']} cases, {s['passed']} passed, "
                 f"{s['failed']} failed")
    return lines


@click.command("regress")
@click.argument("spec_file", metavar="SPEC.yaml", type=_FILE)
@click.option("--fixtures-dir", type=click.Path(file_okay=False),
              help="where fixture ids are looked up (default: the spec's directory)")
@click.option("--json", "as_json", is_flag=True, help="the report as one JSON object")
@app_option()
def regress_cmd(spec_file: str, fixtures_dir: str | None, as_json: bool,
                app_spec: str | None) -> None:
    """Run a regression spec: compare each fixture with its run in the store and print a
    table (case, check, pass / FAIL). Records regression.started / regression.completed
    on every compared run; exits 1 when any check fails (usable in CI)."""
    spec = RegressionSpec.load(spec_file)
    with opened(app_spec) as hypha, Ticker(f"regress: {len(spec.fixtures)} fixtures"):
        report = run_regression(spec, hypha.store, fixtures_dir=fixtures_dir)
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        for line in report_lines(report):
            click.echo(line)
    if not report.passed:
        _exit(1)


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], detail: int = 100
           ) -> list[str]:
    """Left-aligned columns; the last column (free text) is cut at ``detail`` characters."""
    rows = [(*r[:-1], " ".join(r[-1].split())[:detail]) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    return [fmt.format(*r).rstrip() for r in (header, *rows)]


#: Registered on the ``hypha`` group by :mod:`hypha_celery.cli.main`.
COMMANDS: tuple[click.Command, ...] = (capture_cmd, compare_cmd, eval_cmd, regress_cmd)
