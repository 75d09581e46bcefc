"""The ``hypha`` command line: demo, run, status, events, cancel, export, import, worker."""

from hypha_celery.cli.main import cli, main

__all__ = ["cli", "main"]
