"""The web console (the ``console`` extra: ``pip install 'hypha-celery[console]'``).

``hypha console`` serves it; in code::

    from hypha_celery.console import ConsoleConfig, create_app

    app = create_app(hypha, ConsoleConfig.from_env())   # a Starlette (ASGI) app

Pages: the first page (the last hour's runs a minute, failure rate and p95 duration as
plots, failing graphs, held runs, queue depths), runs (filters and keyset paging), a run
(graph drawing, steps and state, model and tool calls, replay diff, nested timeline; live
while it goes on), agents, dead letters and quarantine with redrive / release / fail.
Every page runs as a principal (tokens in :class:`ConsoleConfig`); see docs/console.md.
Starlette and Jinja2 are imported only when the app is made."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypha_celery.console.config import ConsoleConfig, parse_tokens
from hypha_celery.errors import ExtraNotInstalled

if TYPE_CHECKING:
    from hypha_celery.client.hypha import Hypha

__all__ = ["INSTALL_HINT", "ConsoleConfig", "create_app", "parse_tokens"]

INSTALL_HINT = "pip install 'hypha-celery[console]'"


def create_app(hypha: Hypha, config: ConsoleConfig | None = None) -> Any:
    """The console's Starlette app for ``hypha`` (see :mod:`.app`)."""
    try:
        from hypha_celery.console.app import create_app as make
    except ImportError as exc:
        raise ExtraNotInstalled(f"the console needs starlette, jinja2 and uvicorn: "
                                f"{INSTALL_HINT}") from exc
    return make(hypha, config)
