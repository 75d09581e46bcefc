"""Commands that pass the options they do not know to a Celery command (``hypha worker``
to ``celery worker``, ``hypha beat`` to ``celery beat``), checked first.

Every option on the command line must be the hypha command's own or one the Celery
command accepts: a typo (``--profle``) is one ``No such option`` line and exit 2 before
anything else, ``--help`` included (an eager ``--help`` used to print the help and exit 0
with the typo unseen)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

__all__ = ["PassThroughCommand", "celery_beat", "celery_worker", "first_unknown", "option_arity"]


def option_arity(params: Iterable[click.Parameter]) -> dict[str, bool]:
    """Every spelling of ``params``' options -> whether it takes a value."""
    out: dict[str, bool] = {}
    for param in params:
        if not isinstance(param, click.Option):
            continue
        takes_value = not (param.is_flag or param.count)
        for name in (*param.opts, *param.secondary_opts):
            out[name] = takes_value
    return out


def _name(token: str) -> str | None:
    """The option a command-line word names (``--x=1`` -> ``--x``, ``-c4`` -> ``-c``), or
    None for a value (``-``, ``-1``, a word)."""
    if token == "-" or not token.startswith("-"):
        return None
    if token[1:].replace(".", "", 1).isdigit():
        return None  # a negative number
    if token.startswith("--"):
        return token.partition("=")[0]
    return token[:2]


def first_unknown(args: Sequence[str], known: dict[str, bool]) -> str | None:
    """The first option of ``args`` not in ``known`` (words after ``--``, and the value
    after an option that takes one, are values)."""
    skip = False
    for token in args:
        if skip:
            skip = False
            continue
        if token == "--":
            return None
        name = _name(token)
        if name is None:
            continue
        if name not in known:
            return name
        attached = "=" in token if token.startswith("--") else len(token) > 2
        skip = known[name] and not attached
    return None


class PassThroughCommand(click.Command):
    """A command whose unknown options go to the Celery command ``celery()`` returns,
    each checked against that command's options before the arguments are parsed."""

    def __init__(self, *args: Any, celery: Callable[[], click.Command], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.celery = celery

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        known = option_arity(self.get_params(ctx)) | option_arity(self.celery().params)
        known |= dict.fromkeys(ctx.help_option_names, False)
        unknown = first_unknown(args, known)
        if unknown is not None:
            close = difflib.get_close_matches(unknown, [k for k in known if k.startswith("--")])
            raise click.NoSuchOption(unknown, possibilities=close, ctx=ctx)
        return super().parse_args(ctx, args)


def celery_worker() -> click.Command:
    from celery.bin.worker import worker

    return _command(worker)


def celery_beat() -> click.Command:
    from celery.bin.beat import beat

    return _command(beat)


def _command(found: object) -> click.Command:
    assert isinstance(found, click.Command), found  # Celery's commands are click's
    return found
