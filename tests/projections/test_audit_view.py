"""``audit_view``: state path, decisions, tool / model / policy records, failure counts and
the outcome, as data; never the run's input, state, node outputs or result."""

from __future__ import annotations

import pytest

from hypha_celery.projections import (
    AuditDecision,
    AuditOutcome,
    AuditPolicyDecision,
    Counts,
    ModelCall,
    ToolCall,
    audit_view,
)
from tests.projections.support import (
    RUN,
    SECRET,
    Step,
    completed,
    created,
    events,
    scheduled,
    started,
)

FANOUT: list[Step] = [
    created(), started(),
    ("decision.policy.recorded", {"step": 0, "type": "next", "node_ids": ["classify"]}),
    scheduled("classify", 1), completed("classify", 1),
    ("decision.policy.recorded", {"step": 1, "type": "fanout", "reducer": "merge",
                                  "node_ids": ["faq", "wiki"]}),
    ("node.fanout.scheduled", {"execution_id": f"{RUN}.2", "step": 2, "reducer": "merge",
                               "edges": [{"execution_id": f"{RUN}.2.0", "node_id": "faq",
                                          "input": SECRET},
                                         {"execution_id": f"{RUN}.2.1", "node_id": "wiki",
                                          "input": SECRET}]}),
    ("node.reducer.completed", {"execution_id": f"{RUN}.2", "reducer": "merge",
                                "update": {"docs": SECRET}}),
    ("decision.policy.recorded", {"step": 2, "type": "next", "node_ids": ["answer"]}),
    scheduled("answer", 3), completed("answer", 3),
    ("decision.policy.recorded", {"step": 3, "type": "finish"}),
    ("run.completed", {"result": {"answer": SECRET}}),
]


def test_state_path_and_decisions() -> None:
    audit = audit_view(events(FANOUT))
    assert audit.run_id == RUN and audit.graph_id == "g" and audit.status == "completed"
    assert audit.state_path == ("classify", "faq", "wiki", "answer")
    assert audit.decisions == (
        AuditDecision(seq=3, step=0, type="next", node_ids=("classify",)),
        AuditDecision(seq=6, step=1, type="fanout", node_ids=("faq", "wiki"), reducer="merge"),
        AuditDecision(seq=9, step=2, type="next", node_ids=("answer",)),
        AuditDecision(seq=12, step=3, type="finish"),
    )
    assert [p.seq for p in audit.policy_decisions] == [3, 6, 9, 12]
    assert audit.outcome == AuditOutcome(status="completed", at=100.0 + 0.5 * 12)
    assert audit.counts == Counts()


def test_no_input_state_node_output_or_result() -> None:
    audit = audit_view(events(FANOUT))
    assert SECRET not in audit.model_dump_json()


def test_hypha_replay_fixture() -> None:
    """hypha scenario 14's trace, in hypha-celery's kinds."""
    audit = audit_view(events([
        created(), started(),
        scheduled("Intake", 1),
        ("tool.policy.checked", {"toolId": "tool.search", "decision": "allowed",
                                 "input": {"query": SECRET}}),
        ("tool.call.completed", {"call_id": "c0", "tool": "tool.search", "output": ["doc"]}),
        ("memory.read.completed", {"target": "working"}),
        scheduled("Completed", 2),
        ("run.completed", {"result": {"answer": "ok"}}),
    ], step_id="1"))
    assert audit.state_path == ("Intake", "Completed")
    assert audit.model_calls == ()
    assert audit.policy_decisions == (AuditPolicyDecision(
        seq=4, type="tool.policy.checked", step_id="1",
        detail={"toolId": "tool.search", "decision": "allowed"}),)
    assert audit.tool_calls == (ToolCall(seq=5, step_id="1", call_id="c0", tool="tool.search",
                                         outcome="completed", output=["doc"]),)
    assert audit.outcome is not None and audit.outcome.status == "completed"
    assert SECRET not in audit.model_dump_json() and "ok" not in audit.model_dump_json()


def test_tool_calls_are_the_finished_ones_with_output_or_error() -> None:
    audit = audit_view(events([
        created(), started(),
        ("tool.call.started", {"call_id": "c0", "name": "search"}),
        ("tool.call.completed", {"call_id": "c0", "name": "search", "output": {"hits": 2},
                                 "request_hash": "ab"}),
        ("tool.call.started", {"call_id": "c1", "name": "fetch"}),
        ("tool.call.failed", {"call_id": "c1", "name": "fetch",
                              "error": {"type": "TimeoutError", "message": "slow"}}),
        ("tool.call.rejected", {"tool": "rm", "reason": "irreversible"}),
    ]))
    assert audit.tool_calls == (
        ToolCall(seq=4, step_id=None, call_id="c0", tool="search", outcome="completed",
                 output={"hits": 2}),
        ToolCall(seq=6, step_id=None, call_id="c1", tool="fetch", outcome="failed",
                 error={"type": "TimeoutError", "message": "slow"}),
        ToolCall(seq=7, step_id=None, call_id=None, tool="rm", outcome="rejected",
                 reason="irreversible"),
    )


def test_model_calls_pair_by_call_id_and_never_carry_output() -> None:
    audit = audit_view(events([
        created(), started(),
        ("model.call.started", {"call_id": "m0", "model": "gpt", "request_hash": "ab"}),
        ("model.call.started", {"call_id": "m1", "name": "claude"}),
        ("model.call.completed", {"call_id": "m0", "output": SECRET}),
        ("model.call.failed", {"call_id": "m1", "name": "claude",
                               "error": {"type": "RateLimit", "message": SECRET}}),
        ("model.call.completed", {"model": "local", "output": SECRET}),
    ], step_id="2"))
    assert audit.model_calls == (
        ModelCall(seq=3, step_id="2", call_id="m0", model="gpt", outcome="completed"),
        ModelCall(seq=4, step_id="2", call_id="m1", model="claude", outcome="failed"),
        ModelCall(seq=7, step_id="2", call_id=None, model="local", outcome="completed"),
    )
    assert SECRET not in audit.model_dump_json()


def test_failure_handling_counts_and_a_failed_outcome() -> None:
    eid = f"{RUN}.1"
    audit = audit_view(events([
        created(), started(), scheduled("a", 1),
        ("node.execution.retrying", {"execution_id": eid, "attempt": 1, "at": 1.0}),
        ("node.execution.retrying", {"execution_id": eid, "attempt": 2, "at": 2.0}),
        ("node.execution.redelivered", {"execution_id": eid, "delivery": 2}),
        ("recovery.node.timed_out", {"execution_id": eid}),
        ("recovery.run.redriven", {"attempt": 1}),
        ("node.execution.dead_lettered", {"execution_id": eid, "dead_letter_id": 1,
                                          "reason": "retries_exhausted",
                                          "error": {"type": "ValueError", "message": SECRET}}),
        ("run.failed", {"reason": "dead_lettered", "message": f"a: ValueError: {SECRET}"}),
    ]))
    assert audit.counts == Counts(retries=2, redeliveries=1, dead_letters=1, recoveries=1,
                                  timeouts=1)
    assert audit.outcome == AuditOutcome(status="failed", reason="dead_lettered", at=104.5)
    assert audit.status == "failed"
    assert SECRET not in audit.model_dump_json()


def test_a_run_in_progress_has_no_outcome() -> None:
    audit = audit_view(events([created(), started(), scheduled("a", 1)]))
    assert audit.outcome is None and audit.status == "running"
    assert audit.state_path == ("a",)


def test_one_run_and_at_least_one_event() -> None:
    with pytest.raises(ValueError):
        audit_view([])
    with pytest.raises(ValueError):
        audit_view(events([created()]) + events([created()], run_id="r2"))


@pytest.mark.parametrize(("old", "new"), [("Decision", AuditDecision),
                                          ("Outcome", AuditOutcome),
                                          ("PolicyDecision", AuditPolicyDecision)])
def test_the_audits_former_names_resolve_with_a_warning(old: str, new: type) -> None:
    import hypha_celery.projections as projections

    with pytest.warns(DeprecationWarning, match=f"renamed to {new.__name__}"):
        assert getattr(projections, old) is new
    assert old not in projections.__all__
