"""``hypha replay RUN --against MODULE:ATTR``: re-execute a recorded run with new code."""

from __future__ import annotations

from typing import Any

import click

from hypha_celery.cli.common import app_option, echo_json, opened
from hypha_celery.cli.loading import AppLoadError, load_object
from hypha_celery.client.hypha import Hypha
from hypha_celery.errors import RunNotFound
from hypha_celery.graph import Graph
from hypha_celery.rerun import RerunReport, rerun


def _target(spec: str, graph_id: str) -> Graph:
    """``MODULE:ATTR`` naming a :class:`Graph`, or a :class:`Hypha` that registered the
    run's graph."""
    try:
        obj = load_object(spec, option="--against")
    except AppLoadError as exc:
        raise AppLoadError(f"--against {spec}: {exc}") from None
    if isinstance(obj, Graph):
        return obj
    if isinstance(obj, Hypha):
        graph = obj.graphs.get(graph_id)
        if graph is None:
            raise AppLoadError(f"{spec} registers no graph {graph_id!r}")
        return graph
    raise AppLoadError(f"{spec} is a {type(obj).__name__}, not a Graph or a Hypha")


@click.command("replay")
@click.argument("run_id")
@click.option("--against", "against", required=True, metavar="MODULE:ATTR",
              help="the new code: a Graph, or a Hypha that registers the run's graph")
@app_option()
@click.option("--json", "as_json", is_flag=True, help="the report as JSON")
@click.pass_context
def replay(ctx: click.Context, run_id: str, against: str, app_spec: str | None,
           as_json: bool) -> None:
    """Re-run RUN_ID's recorded decisions, nodes and reducers with the code in
    --against, serving every model and tool call from the recording (nothing external
    is called); print the first divergence (exit 1) or that there is none."""
    with opened(app_spec) as hypha:
        events = hypha.store.events(run_id)
        if not events:
            raise RunNotFound(f"no events for run {run_id!r}")
        report = rerun(_target(against, str(events[0].agent_id)), events,
                       memory=hypha.memory)
    if as_json:
        echo_json(_json(report))
    else:
        click.echo(_line(report))
    if not report.ok:
        ctx.exit(1)


def _line(r: RerunReport) -> str:
    counts = (f"{r.decisions} decisions, {r.executions} executions re-run, "
              f"{r.skipped} not re-run")
    if r.divergence is None:
        return f"run {r.run_id}: no divergence ({counts})"
    d = r.divergence
    return (f"run {r.run_id}: diverged at seq {d.seq} (step {d.step}, {d.what}): "
            f"{d.message} ({counts})")


def _json(r: RerunReport) -> dict[str, Any]:
    d = r.divergence
    return {"run_id": r.run_id, "graph_id": r.graph_id, "ok": r.ok, "decisions": r.decisions,
            "executions": r.executions, "skipped": r.skipped,
            "divergence": None if d is None else {
                "seq": d.seq, "step": d.step, "what": d.what, "expected": d.expected,
                "actual": d.actual, "message": d.message}}


COMMANDS = (replay,)
