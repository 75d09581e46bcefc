"""``run_view``: hypha's run status priority, output, error and timing, from events alone."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from hypha_celery.events import Event
from hypha_celery.projections import RunError, run_view
from tests.projections.support import (
    RUN,
    SECRET,
    Step,
    completed,
    created,
    events,
    folded_status,
    scheduled,
    started,
)

DONE: list[Step] = [
    created(user_id="u", session_id="s"), started(),
    ("decision.policy.recorded", {"step": 0, "type": "next", "node_ids": ["a"]}),
    scheduled("a", 1), completed("a", 1),
    ("decision.policy.recorded", {"step": 1, "type": "next", "node_ids": ["b"]}),
    scheduled("b", 2), completed("b", 2),
    ("decision.policy.recorded", {"step": 2, "type": "finish"}),
    ("run.completed", {"result": {"answer": "ok"}}),
]
WAITING: list[Step] = [
    ("human.review.requested", {"review_id": "rv1"}),
    ("run.waiting_human", {"review_id": "rv1", "wait_id": f"human-review:{RUN}"}),
]


def test_a_completed_run() -> None:
    view = run_view(events(DONE))
    assert view.run_id == RUN and view.graph_id == "g"
    assert (view.user_id, view.session_id) == ("u", "s")
    assert view.status == "completed" and view.done
    assert view.output == {"answer": "ok"} and view.error is None
    assert view.steps == 2 and view.events == len(DONE)
    assert view.created_at == 100.0 and view.started_at == 100.5
    assert view.ended_at == view.updated_at == 100.0 + 0.5 * (len(DONE) - 1)
    assert view.duration == view.ended_at - 100.5
    assert view.held is None and not view.cancel_requested


@pytest.mark.parametrize(("steps", "status"), [
    ([created()], "queued"),
    ([created(), ("run.queued", {"behind": "r0"})], "queued"),
    ([created(), ("run.queued", {"behind": "r0"}), ("run.cancel.requested", {"revoked": []})],
     "queued"),
    ([created(), started()], "running"),
    ([created(), ("run.queued", {"behind": "r0"}), started()], "running"),
    ([created(), started(), *WAITING], "waiting_human"),
    ([created(), started(), *WAITING, scheduled("a", 1)], "waiting_human"),
    ([created(), started(), *WAITING, ("human.review.approved", {"review_id": "rv1"})],
     "running"),
    ([created(), started(), *WAITING, ("human.review.rejected", {"review_id": "rv1"})],
     "running"),
    # a second wait after an answered one waits again
    ([created(), started(), *WAITING, ("human.review.approved", {"review_id": "rv1"}),
      *WAITING], "waiting_human"),
    # an expiry answers a wait too (hypha-celery: the policy then decides)
    ([created(), started(), *WAITING, ("human.review.expired", {"review_id": "rv1"})],
     "running"),
    # a review event that is not an answer does not
    ([created(), started(), *WAITING, ("human.review.requested", {"review_id": "rv2"})],
     "waiting_human"),
    # the terminal event wins over a wait, before or after it
    ([created(), started(), *WAITING, ("run.cancelled", {"reason": "cancelled"})], "cancelled"),
    ([created(), started(), ("run.failed", {"reason": "node_failed"}), *WAITING], "failed"),
    ([created(), ("run.cancel.requested", {"revoked": []}),
      ("run.cancelled", {"reason": "cancelled"})], "cancelled"),
])
def test_status_priority(steps: list[Step], status: str) -> None:
    evs = events(steps)
    assert run_view(evs).status == status
    assert folded_status(evs) == status  # the store's projection agrees


def test_any_sign_of_execution_means_the_run_started() -> None:
    """hypha: ``run.started`` *or any later activity* gives ``running``. (The store's
    projection moves to running on run.started only; the runtime always writes it.)"""
    for kind in ("decision.policy.recorded", "node.execution.started", "tool.call.started",
                 "model.call.started", "recovery.node.timed_out", "run.released"):
        assert run_view(events([created(), (kind, {"step": 0})])).status == "running", kind
    for kind in ("run.queued", "run.cancel.requested", "message.enqueued", "eval.started"):
        assert run_view(events([created(), (kind, {})])).status == "queued", kind


def test_the_last_terminal_event_wins() -> None:
    evs = events([created(), started(), ("run.failed", {"reason": "deadline_exceeded"}),
                  ("run.completed", {"result": 1})])
    view = run_view(evs)
    assert view.status == "completed" and view.output == 1 and view.error is None
    assert folded_status(evs) == "completed"


def test_hypha_human_review_scenario() -> None:
    """hypha scenario 19: a model asking for review leaves the run ``waiting_human``."""
    evs = events([created(), started(),
                  ("model.call.started", {"call_id": "c1", "name": "gpt"}),
                  ("model.call.completed", {"call_id": "c1", "name": "gpt"}), *WAITING])
    assert run_view(evs).status == "waiting_human"


@pytest.mark.parametrize(("end", "error"), [
    (("run.failed", {"reason": "node_failed", "message": f"a: ValueError: {SECRET}"}),
     RunError(reason="node_failed", message=f"a: ValueError: {SECRET}")),
    (("run.cancelled", {"reason": "cancelled", "message": "cancelled by request"}),
     RunError(reason="cancelled", message="cancelled by request")),
    (("run.failed", {}), RunError(reason="failed")),
])
def test_failed_and_cancelled_runs_carry_their_reason(end: Step, error: RunError) -> None:
    view = run_view(events([created(), started(), end]))
    assert view.error == error and view.output is None
    assert view.ended_at == 101.0 and view.duration == 0.5


def test_a_run_cancelled_while_queued_has_no_duration() -> None:
    view = run_view(events([created(), ("run.queued", {"behind": "r0"}),
                            ("run.cancel.requested", {"revoked": []}),
                            ("run.cancelled", {"reason": "cancelled"})]))
    assert view.status == "cancelled" and view.cancel_requested
    assert view.started_at is None and view.ended_at == 101.5 and view.duration is None


@pytest.mark.parametrize(("hold", "held"), [
    ([("run.quarantined", {"execution_id": f"{RUN}.1", "reason": "unknown_effect"})],
     "quarantined"),
    ([("run.quarantined", {"execution_id": f"{RUN}.1"}), ("run.released", {})], None),
    ([("run.parked", {"execution_id": f"{RUN}.1", "dead_letter_id": 3})], "parked"),
    ([("run.parked", {"execution_id": f"{RUN}.1", "dead_letter_id": 3}),
      ("run.redriven", {"execution_id": f"{RUN}.1", "node_id": "a"})], None),
    ([("run.parked", {"execution_id": f"{RUN}.1", "dead_letter_id": 3}),
      ("run.failed", {"reason": "dead_lettered"})], None),
])
def test_a_held_run_is_running_and_says_why(hold: list[Step], held: str | None) -> None:
    view = run_view(events([created(), started(), scheduled("a", 1), *hold]))
    assert view.held == held
    assert view.status == ("failed" if hold[-1][0] == "run.failed" else "running")


def test_order_of_the_given_events_does_not_matter() -> None:
    evs = events(DONE)
    shuffled = evs[:]
    random.Random(7).shuffle(shuffled)
    assert run_view(shuffled) == run_view(evs)


def test_without_run_created_the_envelope_names_the_owner() -> None:
    evs = events([started(), scheduled("a", 1)], user_id="u", session_id="s", agent_id="g")
    view = run_view(evs)
    assert (view.graph_id, view.user_id, view.session_id) == ("g", "u", "s")
    assert view.created_at == 100.0


def test_the_run_created_payload_is_the_owner() -> None:
    evs = events([created(graph_id="g", user_id=None, session_id=None), started()],
                 user_id="other", session_id="other", agent_id="other")
    view = run_view(evs)
    assert (view.graph_id, view.user_id, view.session_id) == ("g", None, None)


def test_one_run_and_at_least_one_event() -> None:
    with pytest.raises(ValueError, match="at least one event"):
        run_view([])
    mixed = events([created()]) + events([created()], run_id="r2")
    with pytest.raises(ValueError, match="2 runs"):
        run_view(mixed)


def test_the_view_is_frozen_and_strict() -> None:
    view = run_view(events(DONE))
    with pytest.raises(ValidationError):
        view.status = "failed"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        type(view).model_validate({**view.model_dump(), "extra": 1})
    assert type(view).model_validate_json(view.model_dump_json()) == view


def test_pure() -> None:
    evs = events(DONE)
    before = [e.model_copy(deep=True) for e in evs]
    assert run_view(evs) == run_view(evs)
    assert evs == before
    assert all(isinstance(e, Event) for e in evs)
