"""What every ``hypha`` command shares: the ``--app`` option, opening the app, JSON output."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from hypha_celery.cli.loading import app_from, load_app
from hypha_celery.client.hypha import Hypha

__all__ = ["APP_HELP", "app_option", "echo_json", "echo_line", "load_app", "opened"]

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
