"""Run a deploy manifest's command without serving anything: ``python -m
tests.deploy.dryrun hypha worker --profile io``.

Every option is parsed by the program that would parse it in production, and an unknown
or renamed one fails (exit status != 0):

* ``hypha ...``: hypha's own command line runs for real (loads the app, checks its options,
  builds Celery's argv); where it would start Celery (``Celery.start`` /
  ``worker_main``), Celery parses that argv with ``--help`` last instead, which refuses an
  unknown option before it prints the help; a gevent worker's patched process (the io
  profile) runs here, unpatched;
* ``hypha console ...``: run with ``--dry-run`` added (the console checks its options and
  settings, the tokens and the cookie key, says what it would serve and exits); were it
  to serve anyway, uvicorn's ``run`` refuses;
* ``celery flower ...``: Flower passes on only the options it knows and drops the others
  silently, so every option must be one of Flower's here; then Flower parses them and
  stops before it builds its server;
* any other ``celery ...``: run with ``--help`` last.
"""

from __future__ import annotations

import sys
from typing import Any


def _celery_parses_only() -> None:
    import celery

    start = celery.Celery.start

    def dry_start(self: Any, argv: list[str] | None = None) -> Any:
        code = start(self, [*(argv or []), "--help"])
        if code:
            raise SystemExit(code)
        return code

    def dry_worker_main(self: Any, argv: list[str] | None = None) -> Any:
        if not argv or argv[0] != "worker":
            raise SystemExit(f"worker_main argv must start with 'worker': {argv!r}")
        return dry_start(self, argv)

    celery.Celery.start = dry_start
    celery.Celery.worker_main = dry_worker_main


class _StopBeforeServing(SystemExit):
    pass


def _flower_parses_only() -> None:
    import flower.command as command

    apply = command.apply_options

    def strict_apply(prog_name: str, argv: list[str]) -> None:
        unknown = [a for a in argv if a.startswith("-") and not command.is_flower_option(a)]
        if unknown:
            raise SystemExit(f"flower ignores unknown options {unknown}")
        apply(prog_name, argv)

    def no_server(**_: Any) -> None:
        raise _StopBeforeServing(0)

    command.apply_options = strict_apply
    command.Flower = no_server


def _green_in_place() -> None:
    """A gevent worker (the io profile) replaces its process by one that patches first
    and runs :func:`~hypha_celery.cli.worker.green_main`: here that program runs in this
    process, unpatched, so its argv is parsed as it would be (and Celery's, dry)."""
    from hypha_celery.cli import worker

    def run_here(argv: list[str]) -> None:
        if argv[1:3] != ["-c", worker.GREEN_BOOT]:
            raise SystemExit(f"dryrun: an unexpected program replaces hypha: {argv[:3]!r}")
        sys.argv = ["-c", *argv[3:]]
        worker.green_main()

    worker.replace_process = run_here


def _never_serve() -> None:
    import uvicorn

    def refuse(*_: Any, **__: Any) -> None:
        raise SystemExit("dryrun: the console would serve (no --dry-run?)")

    uvicorn.run = refuse


def main(argv: list[str]) -> None:
    prog, args = argv[0], argv[1:]
    _celery_parses_only()
    if prog == "hypha":
        if args[:1] == ["console"]:
            _never_serve()
            args = [*args, "--dry-run"]
        from hypha_celery.cli.main import cli

        _green_in_place()
        cli.main(args=args, prog_name="hypha")
    elif prog == "celery":
        from celery.bin.celery import main as celery_main

        if "flower" in args:
            _flower_parses_only()
        else:
            args = [*args, "--help"]
        sys.argv = ["celery", *args]
        celery_main()
    else:
        raise SystemExit(f"dryrun: no dry run for {prog!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
