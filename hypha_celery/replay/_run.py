"""Capture a stored run, recording ``replay.started`` / ``replay.completed | failed``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hypha_celery.errors import RunNotFound
from hypha_celery.events import payloads as ev
from hypha_celery.replay._fixture import ReplayFixture, capture
from hypha_celery.replay._record import emit
from hypha_celery.replay._spec import ReplaySpec
from hypha_celery.store import EventStore


def capture_run(
    store: EventStore, run_id: str, spec: ReplaySpec | None = None, *,
    fixture_id: str | None = None, output_contract: Mapping[str, object] | None = None,
    save: Callable[[ReplayFixture], object] | None = None, record_events: bool = True,
) -> ReplayFixture:
    """Read ``run_id``'s events from ``store`` and :func:`capture` them, then ``save`` the
    fixture when given (e.g. ``FileFixtureStore(dir).save``). With ``record_events`` the
    run's log gets ``replay.started`` then ``replay.completed`` (ids and counts, never
    content) or, if the capture or the save raised, ``replay.failed`` with the error.
    :class:`RunNotFound` for an unknown run (nothing recorded)."""
    events = store.events(run_id)
    if not events:
        raise RunNotFound(f"no run {run_id!r} in the event store")
    fid = fixture_id or run_id
    if record_events:
        emit(store, run_id, ev.ReplayStarted(fixture_id=fid))
    try:
        fixture = capture(events, spec, run_id=run_id, fixture_id=fid,
                          output_contract=output_contract)
        if save is not None:
            save(fixture)
    except Exception as exc:
        if record_events:
            emit(store, run_id, ev.ReplayFailed(fixture_id=fid,
                                                error=f"{type(exc).__name__}: {exc}"[:500]))
        raise
    if record_events:
        emit(store, run_id, ev.ReplayCompleted(
            fixture_id=fid, events=len(fixture.events), state_path=fixture.state_path,
            tool_calls=len(fixture.tool_calls), model_calls=len(fixture.model_calls),
            policy_decisions=len(fixture.policy_decisions),
            memory_reads=len(fixture.memory_read_set),
            skill_activations=len(fixture.skill_activations),
            context_builds=len(fixture.context_hashes),
            reasoning_decisions=len(fixture.reasoning_decisions)))
    return fixture
