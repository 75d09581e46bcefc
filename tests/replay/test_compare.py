"""compare / TraceDiff: index-wise mismatches, multiset missing / extra, canonical output."""

from __future__ import annotations

import json

import pytest

from hypha_celery.errors import EmptyTrace, FixtureRunMismatch
from hypha_celery.replay import FAMILIES, ReplaySpec, capture, compare, diff_sequences
from hypha_celery.replay._compare import OutputDiff, describe
from tests.replay.support import completed_run_events, ev


def test_sequence_diff_is_index_wise_plus_multiset() -> None:
    diff = diff_sequences(["a", "b", "c"], ["a", "c", "c", "d"])
    assert not diff.passed
    assert [(m.index, m.expected, m.actual) for m in diff.mismatches] == [
        (1, "b", "c"), (3, None, "d")]
    assert diff.missing == ["b"] and diff.extra == ["c", "d"]

    reordered = diff_sequences(["a", "b"], ["b", "a"])
    assert not reordered.passed  # same multiset, different order: still a difference
    assert reordered.missing == reordered.extra == []
    assert diff_sequences([], []).passed


def test_identical_events_pass_every_family() -> None:
    fixture = capture(completed_run_events())
    diff = compare(fixture, completed_run_events())
    assert diff.passed and diff.failed() == []
    assert [diff.family(name).passed for name in FAMILIES] == [True] * 10
    assert json.loads(diff.model_dump_json())["passed"] is True
    with pytest.raises(KeyError):
        diff.family("snapshots")


def test_output_is_compared_as_canonical_json() -> None:
    assert OutputDiff(expected={"a": 1, "b": [1, {"c": 2, "d": 3}]},
                      actual={"b": [1, {"d": 3, "c": 2}], "a": 1}).passed
    assert not OutputDiff(expected={"a": 1}, actual={"a": 1.5}).passed
    assert not OutputDiff(expected=None, actual={}).passed


def test_a_changed_tool_output_and_an_extra_node() -> None:
    fixture = capture(completed_run_events())
    events = completed_run_events()
    events[3] = events[3].model_copy(update={"payload": {**events[3].payload,
                                                          "output": {"results": []}}})
    events.insert(6, ev(6, "node.execution.scheduled", {"node_id": "review", "step": 2}))
    events[-1] = events[-1].model_copy(update={"seq": 8})
    diff = compare(fixture, events)
    assert diff.failed() == ["event_types", "state_path", "tool_calls"]
    assert diff.state_path.extra == ["review"] and diff.state_path.missing == []
    assert diff.tool_calls.missing == [
        'tool.call.completed|1|tool.search|recorded|{"results":["hypha"]}']
    line = describe(diff.state_path)
    assert line == "[2] expected (none) got review; extra review"
    assert describe(diff.output) == ""


def test_compare_with_another_fixture() -> None:
    fixture = capture(completed_run_events())
    other = capture(completed_run_events("run_b"))
    diff = compare(fixture, other)
    assert diff.passed and (diff.expected_run_id, diff.actual_run_id) == ("run_replay", "run_b")


def test_checking_run_ids_refuses_another_run() -> None:
    fixture = capture(completed_run_events())
    assert compare(fixture, completed_run_events(), check_run_id=True).passed
    with pytest.raises(FixtureRunMismatch, match="captured from run run_replay, not run_b") \
            as info:
        compare(fixture, completed_run_events("run_b"), check_run_id=True)
    assert info.value.actual_run_id == "run_b"
    with pytest.raises(FixtureRunMismatch):
        compare(fixture, capture(completed_run_events("run_b")), check_run_id=True)
    assert compare(fixture, completed_run_events("run_b")).passed  # not asked: fine


def test_the_fixture_spec_applies_to_both_sides() -> None:
    fixture = capture(completed_run_events(), ReplaySpec(capture_tool_io=False))
    events = completed_run_events()
    events[3] = events[3].model_copy(update={"payload": {**events[3].payload, "output": 42}})
    diff = compare(fixture, events)  # the tool output changed, but tools are not captured
    assert diff.passed and diff.tool_calls.actual == []


def test_compare_needs_events() -> None:
    with pytest.raises(EmptyTrace):
        compare(capture(completed_run_events()), [ev(1, "eval.completed")])
