"""Re-execute a recorded run against new code and report the first divergence.

Like Temporal's replayer: the recorded events drive the run; the *new* graph's decision
policy, node functions and reducers are called with exactly what the originals saw (the
projection rebuilt from the events up to that point, the recorded inputs), and every
model or tool call made through ``ctx`` is served from the recording
(:mod:`hypha_celery.graph.calls`) — nothing external is called. The first place where the
new code decides, calls or returns something else is reported.
"""

from hypha_celery.rerun._engine import Divergence, RerunReport, rerun

__all__ = ["Divergence", "RerunReport", "rerun"]
