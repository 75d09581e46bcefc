"""How an attempt's end is told to the middleware (``seams.attempt_end``)."""

from __future__ import annotations

from hypha_celery.middleware import AttemptEnd
from hypha_celery.runtime.protocol import NodeOutcome
from hypha_celery.runtime.seams import attempt_end


def test_an_attempt_ends_ok_failed_stale_or_parked() -> None:
    ok = NodeOutcome("r", "r.1", "n", {"x": 1}, duration=0.5)
    failed = NodeOutcome("r", "r.1", "n", error={"type": "Boom", "class": "unknown",
                                                 "message": ""}, duration=0.5)
    parked = NodeOutcome("r", "r.1", "n", error={
        "type": "AwaitingMessage", "class": "unknown", "message": "waiting",
        "awaiting": {"message_id": "h-1", "queue": "u:s:workflow:r", "until": 9.0}},
        duration=0.5)
    assert attempt_end(ok) == AttemptEnd(True, None, 0.5)
    assert attempt_end(failed) == AttemptEnd(False, "Boom", 0.5)
    assert attempt_end(parked) == AttemptEnd(True, None, 0.5)  # it did its work
    assert attempt_end(None) == AttemptEnd(False, "Stale")
