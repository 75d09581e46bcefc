"""Recovery: the supervisor sweep (run by celery beat) and the operator actions
behind ``hypha dlq`` and ``hypha quarantine``."""

from hypha_celery.beat.operator import fail_quarantined, redrive, release
from hypha_celery.beat.supervisor import DEFAULT_POLICY, RecoveryPolicy, sweep

__all__ = ["DEFAULT_POLICY", "RecoveryPolicy", "fail_quarantined", "redrive", "release", "sweep"]
