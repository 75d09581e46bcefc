"""What every ``hypha`` command shares: the ``--app`` option, opening the app, JSON output,
waiting for a run to settle."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from hypha_celery.cli.loading import app_from, load_app
from hypha_celery.client.hypha import Hypha
from hypha_celery.client.run import RunHandle
from hypha_celery.errors import WaitTimeout

__all__ = ["APP_HELP", "app_option", "echo_json", "echo_line", "load_app", "opened", "settle"]

APP_HELP = "the Hypha object, e.g. examples.support:hypha (env HYPHA_APP)"

_F = TypeVar("_F", bound=Callable[..., Any])


def app_option(required: bool = False) -> Callable[[_F], _F]:
    return click.option("--app", "app_spec", envvar="HYPHA_APP", metavar="MODULE:ATTR",
                        required=required, help=APP_HELP + ("" if required else
                        "; default Hypha.from_env()"))


@contextmanager
def opened(app_spec: str | None) -> Iterator[Hypha]:
    hypha = app_from(app_spec)
    try:
        yield hypha
    finally:
        hypha.close()


def echo_line(value: dict[str, Any]) -> str:
    """One JSON object on one line (``--json`` listings)."""
    return json.dumps(value, sort_keys=True, default=str)


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def settle(handle: RunHandle, timeout: float | None = None) -> str:
    """Wait until the run is no longer queued or running (it ended, or waits for a
    person); its status. :class:`WaitTimeout` after ``timeout`` seconds."""
    end = None if timeout is None else time.monotonic() + timeout
    while (status := handle.status().status) in ("queued", "running"):
        if end is not None and time.monotonic() > end:
            raise WaitTimeout(f"run {handle.id} still {status} after {timeout}s")
        time.sleep(0.05)  # ends: the run's deadline bounds it
    return status
