"""Retries: the middleware that decides what becomes of a failed node attempt.

dramatiq's ``Retries`` is the model: told every finished attempt
(``after_attempt_outcome``), it may change its outcome. An error of a class the node's
:class:`~hypha_celery.graph.RetryPolicy` retries counts a failure against the node's
dependency (its circuit breaker: ``THRESHOLD`` failures open it for ``RESET`` s; after
that it is half-open: the first ``HALF_OPEN_PROBES`` retries of the open period run as
its probes, the others wait one more ``RESET``; a probe's success closes it, its failure
re-opens it; a failed ``ctx.llm`` call counts against the node's circuit of that
provider, so one provider's failures hold no other's retries), then the attempt is tried
again after the policy's delay (``node.execution.retrying``), or dead-lettered
(``retries_exhausted``) when it used its attempts. A late result is never retried; a
dead letter is final; an error that says its effect may have happened
(:class:`~hypha_celery.errors.EffectOutcomeUnknown`) is never retried (the coordinator
quarantines the run); an attempt another middleware already decided is left as it is. A
success closes the circuits this middleware saw fail (the node's, and those of the
providers its calls reached), and a retried attempt's success (a probe, maybe from
another process) closes its node's.

Built in, first on every :class:`~hypha_celery.Hypha`'s list (``after_*`` hooks run in
reverse, so middleware of the user's that decides an attempt does so before it).
"""

from __future__ import annotations

import threading
import time

from hypha_celery.middleware import Middleware, Settling
from hypha_celery.runtime.failures import HALF_OPEN_PROBES, RESET, THRESHOLD
from hypha_celery.runtime.protocol import effect_unknown
from hypha_celery.store import EventStore

__all__ = ["Retries"]


class Retries(Middleware):
    """Retry or dead-letter failed attempts, by the node's retry policy and circuit."""

    def __init__(self, store: EventStore, threshold: int = THRESHOLD,
                 reset: float = RESET, probes: int = HALF_OPEN_PROBES) -> None:
        self.store, self.threshold, self.reset, self.probes = store, threshold, reset, probes
        #: Dependency keys this middleware counted failures for (a success closes them).
        self._failing: set[str] = set()
        self._lock = threading.Lock()

    def after_attempt_outcome(self, outcome: Settling) -> None:
        error = outcome.error
        if error is None:
            if outcome.attempt.attempt > 1:  # a retry (maybe a half-open probe) worked
                self.store.record_success(outcome.dependency)
            if self._failing:  # the happy path pays one truth test
                for key in outcome.dependencies:
                    self._succeeded(key)
            return
        policy = outcome.retry_policy
        if (outcome.decided or policy is None or error.get("class") not in policy.retry_on
                or outcome.late or error.get("dead_letter") or effect_unknown(error)
                or "awaiting" in error):
            return  # not retryable; a dead letter is final; an unknown effect quarantines;
            # a node awaiting a message parks the run
        key, now = outcome.dependency, time.time()
        opened, open_until = self.store.record_failure(key, now, self.threshold, self.reset)
        with self._lock:
            self._failing.add(key)
        attempt = outcome.attempt
        if not policy.retries(error["class"], attempt.attempt):
            outcome.dead_letter("retries_exhausted")
            return
        run_at = self.store.claim_probe(key, now, self.probes, self.reset) \
            if open_until > now else now
        delay = max(policy.delay(attempt.execution_id, attempt.attempt), run_at - now, 0.0)
        outcome.retry(round(delay, 3), (key, open_until) if opened else None)

    def _succeeded(self, key: str) -> None:
        """Only a process that saw failures of ``key`` pays for closing its circuit."""
        with self._lock:
            if key not in self._failing:
                return
            self._failing.discard(key)
        self.store.record_success(key)
