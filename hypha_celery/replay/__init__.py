"""Replay: capture a run's events as a fixture and compare later runs with it.

Replay is pure over recorded events: it never calls a model, a tool, a node or any
external service, and it leaves out evaluation's own ``eval.*``, ``replay.*`` and
``regression.*`` events. See docs/traces.md.
"""

from hypha_celery.replay._compare import (
    FAMILIES,
    Mismatch,
    OutputDiff,
    SequenceDiff,
    TraceDiff,
    compare,
    diff_sequences,
)
from hypha_celery.replay._fixture import (
    FIXTURE_VERSION,
    Projection,
    ReplayFixture,
    capture,
    final_output,
    project,
)
from hypha_celery.replay._run import capture_run
from hypha_celery.replay._spec import ReplaySpec, SnapshotPolicy
from hypha_celery.replay._store import (
    MAX_FIXTURE_BYTES,
    FileFixtureStore,
    read_fixture,
    write_fixture,
)

__all__ = [
    # capturing
    "FIXTURE_VERSION",
    "Projection",
    "ReplayFixture",
    "ReplaySpec",
    "SnapshotPolicy",
    "capture",
    "capture_run",
    "final_output",
    "project",
    # comparing
    "FAMILIES",
    "Mismatch",
    "OutputDiff",
    "SequenceDiff",
    "TraceDiff",
    "compare",
    "diff_sequences",
    # storing
    "MAX_FIXTURE_BYTES",
    "FileFixtureStore",
    "read_fixture",
    "write_fixture",
]
