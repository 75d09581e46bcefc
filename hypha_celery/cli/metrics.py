"""``hypha metrics``: messages waiting in each of the app's queues, from the broker.

A table, ``--json`` for scripts, or ``--serve PORT``: a ``/metrics`` endpoint of the
gauges (``hypha_queue_depth{queue}``, ``hypha_agents{phase}``) for Prometheus to scrape,
when no worker exports them (``HYPHA_METRICS_PORT``)."""

from __future__ import annotations

import time

import click

from hypha_celery.cli.common import app_option, echo_line, operator_only
from hypha_celery.cli.loading import app_from
from hypha_celery.client.hypha import Hypha
from hypha_celery.metrics import HyphaCollector, queue_depths
from hypha_celery.metrics._exporter import registry, serve


def depth_lines(depths: dict[str, int]) -> list[str]:
    """The table: one queue a line, the widest name setting the column."""
    width = max((len(q) for q in depths), default=5)
    return [f"{'QUEUE':<{width}}  MESSAGES",
            *(f"{q:<{width}}  {n:>8}" for q, n in depths.items())]


def _serve(hypha: Hypha, port: int, addr: str) -> None:
    server = serve(port, registry(HyphaCollector(hypha.celery, hypha.queues, hypha.store)),
                   addr)
    click.echo(f"serving http://{addr}:{port}/metrics (Ctrl-C stops)", err=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()


@click.command("metrics")
@app_option()
@click.option("--json", "as_json", is_flag=True, help="one JSON object: queue -> messages")
@click.option("--serve", "port", type=click.IntRange(1, 65535), metavar="PORT",
              help="serve the gauges on http://ADDR:PORT/metrics until Ctrl-C")
@click.option("--addr", default="0.0.0.0", show_default=True, help="with --serve")
def metrics(app_spec: str | None, as_json: bool, port: int | None, addr: str) -> None:
    """Queue depths: messages waiting in each of the app's queues (never their content)."""
    operator_only("metrics")
    hypha = app_from(app_spec)
    try:
        if hypha.settings.embedded:
            raise click.UsageError("no broker: set HYPHA_BROKER_URL (or --app) to read its "
                                   "queues")
        if port is not None:
            _serve(hypha, port, addr)
            return
        depths = queue_depths(hypha.celery, hypha.queues())
        if as_json:
            click.echo(echo_line(depths))
        else:
            for line in depth_lines(depths):
                click.echo(line)
    finally:
        hypha.close()


COMMANDS = (metrics,)
