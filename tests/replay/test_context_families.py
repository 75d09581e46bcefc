"""What went into the model calls, in fixtures, compare and the audit view: skill
activations, context hashes, memory reads as ``id@revision``, reasoning decisions."""

from __future__ import annotations

from typing import Any

from hypha_celery.events import Event
from hypha_celery.projections import audit_view
from hypha_celery.replay import ReplayFixture, capture, compare
from tests.replay.support import completed_run_events, ev


def _with_context(run_id: str = "run_replay", *, context_hash: str = "sha256:aa",
                  revision: int = 2) -> list[Event]:
    base = completed_run_events(run_id)
    extra: list[tuple[str, dict[str, Any]]] = [
        ("context.build.completed", {
            "build_id": "b1", "step": 1, "items": 3, "tokens": 120,
            "tokens_by_source": {"system": 20, "skills": 60, "memory": 40},
            "items_by_source": {"system": 1, "skills": 1, "memory": 1}, "dropped": 1,
            "compacted": 1, "context_hash": context_hash}),
        ("skill.loaded", {"skill_id": "pdf", "version": "1.0.0", "build_id": "b1",
                          "content_hash": "sha256:cd", "chars": 300, "tokens": 60}),
        ("skill.completed", {"skill_id": "pdf", "version": "1.0.0", "build_id": "b1",
                             "step": 1}),
        ("memory.read.completed", {"step": 1, "operation_id": "op1",
                                   "records": [{"id": "m1", "revision": revision}]}),
        ("reasoning.decision.recorded", {"step": 1, "decision": "tool:search"}),
        ("memory.write.committed", {"operation_id": "op2", "record_id": "m2",
                                    "revision": 1}),
    ]
    last = base[-1].seq
    added = [ev(last + i, kind, data, run_id=run_id, step="1")
             for i, (kind, data) in enumerate(extra, start=1)]
    end = base[-1].model_copy(update={"seq": last + len(extra) + 1})
    return [*base[:-1], *added, end]


def test_a_fixture_keeps_what_went_into_the_model_calls() -> None:
    fixture = capture(_with_context())
    assert fixture.skill_activations == ["1|pdf|1.0.0|sha256:cd"]
    assert fixture.context_hashes == ["1|sha256:aa"]
    assert fixture.reasoning_decisions == ["1|tool:search"]
    assert fixture.memory_read_set == ["1|working", "1||m1@2"]


def test_a_fixture_of_an_older_version_loads_without_them() -> None:
    doc = capture(completed_run_events()).model_dump(mode="json")
    for name in ("skill_activations", "context_hashes", "reasoning_decisions"):
        del doc[name]
    old = ReplayFixture.model_validate(doc)
    assert old.skill_activations == old.context_hashes == old.reasoning_decisions == []
    assert compare(old, completed_run_events()).passed


def test_compare_names_a_changed_context_or_memory_revision() -> None:
    fixture = capture(_with_context())
    assert compare(fixture, _with_context()).passed
    diff = compare(fixture, _with_context(context_hash="sha256:bb", revision=3))
    assert diff.failed() == ["memory_read_set", "context_hashes"]
    assert diff.context_hashes.missing == ["1|sha256:aa"]
    assert diff.memory_read_set.extra == ["1||m1@3"]


def test_the_audit_view_shows_builds_skills_reads_and_counts() -> None:
    view = audit_view(_with_context())
    (build,) = view.context_builds
    assert (build.tokens, build.tokens_by_source["skills"], build.dropped,
            build.context_hash) == (120, 60, 1, "sha256:aa")
    assert [(s.skill_id, s.version) for s in view.skill_activations] == [("pdf", "1.0.0")]
    assert [r.records for r in view.memory_reads] == [(), ("m1@2",)]
    assert (view.counts.skill_activations, view.counts.reasoning_decisions,
            view.counts.memory_writes) == (1, 1, 1)
