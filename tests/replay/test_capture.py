"""capture / project over hand-built events: signatures, families, ordering, typed errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hypha_celery.errors import EmptyTrace, EvaluationError, InvalidContract, MixedRunTrace
from hypha_celery.replay import ReplaySpec, capture, compare, final_output, project
from tests.replay.support import ANSWER_CONTRACT, completed_run_events, ev


def test_replay_spec_defaults_are_explicit() -> None:
    spec = ReplaySpec()
    assert spec.model_dump() == {
        "capture_model_io": True, "capture_tool_io": True, "capture_memory_read_set": True,
        "capture_policy_decisions": True, "snapshot_policy": "state_path"}
    # hypha drops a family whose flag is omitted; here an omitted flag keeps its default
    only_tools_off = ReplaySpec(capture_tool_io=False)
    assert only_tools_off.capture_model_io and only_tools_off.capture_policy_decisions
    assert not only_tools_off.keeps("tool.call.completed")
    assert only_tools_off.keeps("tool.policy.checked")  # a policy, not tool I/O


@pytest.mark.parametrize("bad", [{"capture_tool_io": False, "typo": 1},
                                 {"snapshot_policy": "everything"},
                                 {"capture_model_io": "maybe"}])
def test_replay_spec_rejects_unknown_fields_and_values(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ReplaySpec.model_validate(bad)


def test_hypha_replay_scenario_capture() -> None:
    """hypha §4 scenario 14, in this runtime's taxonomy."""
    fixture = capture(completed_run_events(), run_id="run_replay", now=lambda: 1.5)
    assert fixture.id == fixture.run_id == "run_replay" and fixture.created_at == 1.5
    assert fixture.state_path == ["intake", "completed"]
    assert fixture.model_calls == []
    assert fixture.final_output == {"answer": "ok"}
    assert fixture.policy_decisions == ['1|tool.search|{"allowed":true}']
    assert fixture.tool_calls == [
        'tool.call.completed|1|tool.search|recorded|{"results":["hypha"]}']
    assert fixture.memory_read_set == ["1|working"]
    assert fixture.event_types == [e.type for e in completed_run_events()]

    changed = [e if e.type != "run.completed" else e.model_copy(
        update={"payload": {"result": {"answer": "changed"}}}) for e in completed_run_events()]
    diff = compare(fixture, changed)
    assert diff.event_types.passed and diff.state_path.passed
    assert not diff.output.passed and not diff.passed
    assert diff.failed() == ["output"]


def test_capture_for_another_run_id_names_the_event() -> None:
    with pytest.raises(MixedRunTrace, match="not different_run") as info:
        capture(completed_run_events(), run_id="different_run")
    assert info.value.event_id == "run_replay:1"
    assert isinstance(info.value, EvaluationError)


def test_capture_of_two_runs_names_the_first_stranger() -> None:
    events = completed_run_events()
    events.insert(3, ev(3, "memory.read.completed", {"target": "x"}, run_id="other"))
    with pytest.raises(MixedRunTrace) as info:
        capture(events)
    assert (info.value.event_id, info.value.run_id, info.value.expected_run_id) == (
        "other:3", "other", "run_replay")


def test_capture_of_nothing_is_an_empty_trace() -> None:
    with pytest.raises(EmptyTrace):
        capture([])
    # evaluation's own events are not the run's trace
    with pytest.raises(EmptyTrace):
        capture([ev(1, "eval.started"), ev(2, "replay.completed"), ev(3, "regression.failed")])


def test_capture_leaves_out_evaluation_events_and_orders_by_seq() -> None:
    events = completed_run_events()
    noisy = [*events, ev(8, "eval.completed", {"summary": {}}), ev(9, "replay.started"),
             ev(10, "regression.completed")]
    fixture = capture(list(reversed(noisy)))
    assert [e.seq for e in fixture.events] == [1, 2, 3, 4, 5, 6, 7]
    assert capture(events).model_dump(exclude={"created_at"}) == fixture.model_dump(
        exclude={"created_at"})


def test_decision_and_fanout_signatures() -> None:
    events = [
        ev(1, "decision.policy.recorded", {"step": 0, "type": "next", "node_ids": ["classify"]},
           step="0"),
        ev(2, "node.execution.scheduled", {"execution_id": "r.1", "node_id": "classify",
                                           "step": 1}),
        ev(3, "decision.policy.recorded", {"step": 1, "type": "fanout", "reducer": "merge",
                                           "node_ids": ["lookup", "lookup"]}),
        ev(4, "node.fanout.scheduled", {"execution_id": "r.2", "step": 2, "reducer": "merge",
                                        "edges": [{"node_id": "lookup", "input": "a"},
                                                  {"node_id": "lookup", "input": "b"}]}),
        ev(5, "decision.policy.recorded", {"step": 2, "type": "finish"}),
        ev(6, "run.completed", {"result": 1}),
    ]
    fixture = capture(events)
    assert fixture.state_path == ["classify", "lookup", "lookup"]
    assert fixture.policy_decisions == ['0|next|["classify"]', '1|fanout|["lookup","lookup"]',
                                        "2|finish|[]"]


def test_model_and_tool_signatures_cover_every_outcome() -> None:
    call = {"execution_id": "r.1", "step": 1, "node_id": "n"}
    events = [
        ev(1, "model.call.started", {**call, "call_id": "m1", "model": "gpt", "request_hash": "h"}),
        ev(2, "model.call.failed", {**call, "call_id": "m1", "model": "gpt",
                                    "error": {"type": "Timeout"}}),
        ev(3, "tool.call.started", {**call, "call_id": "t1", "tool": "mail", "input_hash": "h",
                                    "side_effect": "external_effect"}),
        ev(4, "tool.call.rejected", {**call, "call_id": "t1", "tool": "mail",
                                     "decision": {"allowed": False, "reason": "policy"}}),
        ev(5, "tool.call.failed", {**call, "call_id": "t2", "tool": "web",
                                   "error": {"type": "IOError"}}),
        ev(6, "tool.call.completed", {**call, "call_id": "t3", "tool": "calc", "output": None}),
    ]
    fixture = capture(events)
    assert fixture.model_calls == ["model.call.started|1|gpt", "model.call.failed|1|gpt"]
    assert fixture.tool_calls == [
        'tool.call.rejected|1|mail|recorded|{"allowed":false,"reason":"policy"}',
        'tool.call.failed|1|web|recorded|{"type":"IOError"}',
        "tool.call.completed|1|calc|recorded|null",
    ]


def test_spec_flags_drop_families_from_events_and_signatures() -> None:
    events = [*completed_run_events()[:6],
              ev(7, "model.call.completed", {"call_id": "m", "step": 1, "model": "gpt",
                                             "output": "x"}),
              ev(8, "decision.policy.recorded", {"step": 2, "type": "finish"}),
              ev(9, "run.completed", {"result": {"answer": "ok"}})]
    full = capture(events)
    assert full.model_calls and full.tool_calls and full.memory_read_set
    assert len(full.policy_decisions) == 2

    bare = capture(events, ReplaySpec(capture_model_io=False, capture_tool_io=False,
                                      capture_memory_read_set=False,
                                      capture_policy_decisions=False))
    assert bare.model_calls == bare.tool_calls == bare.memory_read_set == []
    assert bare.policy_decisions == []
    assert bare.event_types == ["run.started", "node.execution.scheduled",
                                "node.execution.scheduled", "run.completed"]
    assert bare.state_path == full.state_path and bare.final_output == full.final_output


def test_snapshot_policies() -> None:
    events = [
        ev(1, "node.execution.completed", {"execution_id": "r.1", "node_id": "a",
                                           "update": {"x": 1}}),
        ev(2, "node.execution.completed", {"execution_id": "r.2.0", "node_id": "b",
                                           "edge_of": "r.2", "update": {"y": 9}}),
        ev(3, "node.reducer.completed", {"execution_id": "r.2", "reducer": "m",
                                         "update": {"y": 2}}),
        ev(4, "node.execution.scheduled", {"execution_id": "r.3", "node_id": "c", "step": 3}),
    ]
    assert capture(events).snapshots is None
    assert capture(events, ReplaySpec(snapshot_policy="none")).state_path == []
    full = capture(events, ReplaySpec(snapshot_policy="full"))
    assert full.state_path == ["c"]
    assert full.snapshots == [  # an edge reaches the state only through its reducer
        {"seq": 1, "step": "1", "execution_id": "r.1", "state": {"x": 1}},
        {"seq": 3, "step": "2", "execution_id": "r.2", "state": {"x": 1, "y": 2}},
    ]


@pytest.mark.parametrize(("terminal", "output"), [
    (("run.completed", {"result": [1, 2]}), [1, 2]),
    (("run.failed", {"reason": "node_failed", "message": "boom"}), {"error": "node_failed"}),
    (("run.cancelled", {"reason": "cancelled"}), {"error": "cancelled"}),
    (None, None),
])
def test_final_output(terminal: tuple[str, dict[str, object]] | None, output: object) -> None:
    events = [ev(1, "run.started")]
    if terminal is not None:
        events.append(ev(2, terminal[0], dict(terminal[1])))
    assert final_output(events) == output
    assert capture(events).final_output == output


def test_output_contract_must_be_a_json_schema() -> None:
    fixture = capture(completed_run_events(), output_contract=ANSWER_CONTRACT)
    assert fixture.output_contract == ANSWER_CONTRACT
    with pytest.raises(InvalidContract, match="not a valid JSON Schema"):
        capture(completed_run_events(), output_contract={"type": "strung"})
    with pytest.raises(InvalidContract, match="JSON Schema object"):
        capture(completed_run_events(), output_contract=["not", "a", "schema"])  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(order=st.permutations(range(7)),
       meta=st.lists(st.sampled_from(["eval.started", "replay.completed",
                                      "regression.failed"]), max_size=4))
def test_capture_is_a_pure_function_of_the_events(order: list[int], meta: list[str]) -> None:
    """Input order and evaluation's own events never change a capture, and a fixture
    always passes against the events it was captured from."""
    events = completed_run_events()
    shuffled = [events[i] for i in order]
    shuffled += [ev(100 + i, t) for i, t in enumerate(meta)]
    fixture = capture(shuffled, now=lambda: 0.0)
    assert fixture == capture(events, now=lambda: 0.0)
    assert compare(fixture, shuffled).passed
    assert project(shuffled).model_dump() == project(fixture.events).model_dump()
