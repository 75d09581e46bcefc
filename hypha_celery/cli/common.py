"""What every ``hypha`` command shares: the ``--app`` option, opening the app, JSON output,
waiting for a run to settle."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from hypha_celery.cli.loading import app_from, load_app
from hypha_celery.client.run import RunHandle
from hypha_celery.client.scoped import ScopedHypha
from hypha_celery.errors import NotPermitted, WaitTimeout
from hypha_celery.principals import Principal

__all__ = ["APP_HELP", "AS_USER", "aligned", "app_option", "echo_json", "echo_line", "iso",
           "load_app", "opened", "operator_only", "principal", "settle"]

APP_HELP = "the Hypha object, e.g. examples.support:hypha (env HYPHA_APP)"

_F = TypeVar("_F", bound=Callable[..., Any])


def app_option(required: bool = False) -> Callable[[_F], _F]:
    return click.option("--app", "app_spec", envvar="HYPHA_APP", metavar="MODULE:ATTR",
                        required=required, help=APP_HELP + ("" if required else
                        "; default Hypha.from_env()"))


#: Where ``hypha --as-user USER`` keeps the user in the root context's ``meta``.
AS_USER = "hypha.as_user"


def principal() -> Principal:
    """Who this command acts for: the user of ``--as-user`` (``HYPHA_AS_USER``), else the
    operator at the terminal, trusted (an admin principal named ``cli``)."""
    ctx = click.get_current_context(silent=True)
    user = ctx.find_root().meta.get(AS_USER) if ctx is not None else None
    return Principal.user(user) if user else Principal.admin("cli")


def operator_only(what: str) -> None:
    """:class:`NotPermitted` unless the command acts for the operator (no ``--as-user``)."""
    if not principal().is_admin:
        raise NotPermitted(f"{what} acts on the whole deployment: the operator's, not a "
                           "user's (drop --as-user)")


@contextmanager
def opened(app_spec: str | None) -> Iterator[ScopedHypha]:
    """The app, as the command's :func:`principal` sees it."""
    hypha = app_from(app_spec)
    try:
        yield hypha.as_principal(principal())
    finally:
        hypha.close()


def aligned(cells: Sequence[Sequence[str]]) -> list[str]:
    """Rows of text cells as left-aligned columns (a header is the first row)."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in cells]


def iso(ts: float) -> str:
    """Epoch seconds as ISO 8601 UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def echo_line(value: Mapping[str, object]) -> str:
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
