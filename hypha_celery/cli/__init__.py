"""The ``hypha`` command line: demo, run (a graph, or a pack's workflow), status, events,
cancel, export, import, worker, pack, review, and the operator / trace / agent groups."""

from hypha_celery.cli.main import cli, main

__all__ = ["cli", "main"]
