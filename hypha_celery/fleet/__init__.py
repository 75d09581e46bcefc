"""A fleet of local processes kept running (``hypha up``'s supervisor).

:class:`Fleet` starts :class:`Child` processes, each in a session of its own with its
output in ``<logs>/<name>.log``; :func:`supervise` watches them until asked to stop,
restarting a child that dies by a :class:`RestartPolicy` (a back-off, and a limit of
restarts within a window) and telling each death and restart as a :class:`Notice`;
:meth:`Fleet.stop` ends them (SIGTERM to each process group, SIGKILL after the grace
period). The CLI keeps the options and the printing."""

from hypha_celery.fleet._processes import (
    TAIL_LINES,
    Child,
    Running,
    listening,
    start,
    stop,
    tail,
    wait_port,
)
from hypha_celery.fleet._supervisor import (
    DEFAULT_RESTARTS,
    Exited,
    Fleet,
    GaveUp,
    Notice,
    Restarted,
    Restarting,
    RestartPolicy,
    exit_reason,
    stop_requested,
    supervise,
)

__all__ = [
    # processes
    "TAIL_LINES",
    "Child",
    "Running",
    "listening",
    "start",
    "stop",
    "tail",
    "wait_port",
    # a fleet kept running
    "DEFAULT_RESTARTS",
    "Exited",
    "Fleet",
    "GaveUp",
    "Notice",
    "RestartPolicy",
    "Restarted",
    "Restarting",
    "exit_reason",
    "stop_requested",
    "supervise",
]
