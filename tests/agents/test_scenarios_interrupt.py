"""GenAgent §4.5 scenarios 1-5: exact-ref interrupts, stale refs, replacement agents, the
completion-vs-interrupt race and the watchdog. Turns are held by MockBackend gates; no
sleep is used to order anything."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery.agents import TurnFailed
from tests.agents.support import (
    Telemetry,
    World,
    is_completion,
    outcome_of,
    result,
    trace,
)
from tests.runtime.support import WAIT, wait_until


def completions(msgs: list[dict[str, Any]]) -> list[tuple[str, tuple[str, str]]]:
    return [(m["ref"], outcome_of(m)) for m in msgs if m["type"] == "completion"]


# -- 1 --------------------------------------------------------------------------------
def test_1_interrupt_request_hits_exactly_the_active_ref(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("never"))])
    ref = w.agents.tell(name, "A")
    w.blocked(hold)

    assert w.agents.interrupt_request(name, ref) == "accepted"

    poll = w.settled(name, ref)
    assert (poll.status, poll.reason) == ("error", "interrupted")
    assert trace(name, "handle_error", "handle_response") == [
        ("handle_error", ref, "interrupted")]
    assert w.agents.interrupt_request(name, ref) == "idle"
    # The abandoned stream runs to its end once released; nothing of it is applied.
    w.release(hold)
    wait_until(lambda: trace(name, "stream"), what="the abandoned stream to finish")
    assert w.agents.poll(name, ref).reason == "interrupted"
    assert trace(name, "handle_response") == []


# -- 2 --------------------------------------------------------------------------------
def test_2_a_stale_ref_cannot_interrupt_its_successor(w: World) -> None:
    name, hold_a, hold_b = w.name(), w.tag("a"), w.tag("b")
    w.start(name, [w.gate(hold_a, result("A done")), w.gate(hold_b, result("B done"))])
    ch = w.agents.channel()
    a = w.agents.tell_with_completion(name, "A", ch)
    b = w.agents.tell_with_completion(name, "B", ch)
    w.blocked(hold_a)
    w.release(hold_a)
    w.blocked(hold_b)

    assert w.agents.interrupt_request(name, a) == "not_current"
    assert w.status(name).current_request == b
    w.release(hold_b)

    msgs = w.messages(ch, is_completion(b))
    assert completions(msgs) == [(a, ("ok", "A done")), (b, ("ok", "B done"))]
    assert trace(name, "handle_response", "handle_error") == [
        ("handle_response", a, "A done"), ("handle_response", b, "B done")]
    assert [e[1] for e in trace(name, "post_turn")] == [a, b]


# -- 3 --------------------------------------------------------------------------------
def test_3_an_old_ref_cannot_interrupt_a_replacement_agent(w: World) -> None:
    name, old_hold, new_hold = w.name(), w.tag("old"), w.tag("new")
    w.start(name, [w.gate(old_hold, result("old"))])
    old_ref = w.agents.tell(name, "old")
    w.blocked(old_hold)
    old = w.agents.whereis(name)
    w.agents.stop(name)

    w.start(name, [w.gate(new_hold, result("new"))])
    new_ref = w.agents.tell(name, "new")
    w.blocked(new_hold)

    assert new_ref != old_ref
    assert w.agents.whereis(name).incarnation != old.incarnation
    assert w.agents.interrupt_request(name, old_ref) == "not_current"
    assert w.agents.cancel_request(name, old_ref) == "not_found"
    assert w.agents.poll(name, old_ref).reason == "not_found"
    w.release(old_hold)  # the old turn's stream ends: nothing of it reaches the new agent
    w.release(new_hold)
    poll = w.settled(name, new_ref)
    assert poll.status == "completed" and poll.response is not None
    assert poll.response.text == "new"
    assert trace(name, "handle_response", "handle_error") == [
        ("handle_response", new_ref, "new")]


# -- 4 --------------------------------------------------------------------------------
ROUNDS = 32


def test_4_completion_racing_an_interrupt_request_ends_exactly_once(w: World) -> None:
    name = w.name()
    holds = [w.tag(f"round{i}") for i in range(ROUNDS)]
    w.start(name, [w.gate(t, result(f"done {i}")) for i, t in enumerate(holds)]
            + [result("sentinel")])
    ch = w.agents.channel()
    answers: dict[str, str] = {}
    msgs: list[dict[str, Any]] = []

    for hold in holds:
        ref = w.agents.tell_with_completion(name, "race", ch)
        w.blocked(hold)
        w.release(hold)
        answers[ref] = w.agents.interrupt_request(name, ref)
        msgs += w.messages(ch, is_completion(ref))
    sentinel = w.agents.tell_with_completion(name, "sentinel", ch)
    msgs += w.messages(ch, is_completion(sentinel))  # any late duplicate came before it

    ends = completions(msgs)
    for ref, answer in answers.items():
        mine = [out for r, out in ends if r == ref]
        assert len(mine) == 1, (ref, answer, mine)
        assert answer in ("accepted", "idle"), answer
        if answer == "accepted":  # an accepted interrupt wins the race
            assert mine[0] == ("error", "interrupted")
        else:
            assert mine[0][0] == "ok"
        poll = w.agents.poll(name, ref)
        assert (poll.status, poll.reason or "") == (
            ("error", "interrupted") if mine[0][0] == "error" else ("completed", ""))
    decided = [e[1] for e in trace(name, "handle_response", "handle_error")]
    assert sorted(decided) == sorted([*answers, sentinel])  # one decision per ref


# -- 5 --------------------------------------------------------------------------------
def test_5_watchdog_ends_a_held_turn_and_the_agent_keeps_serving(w: World) -> None:
    name, hold1, hold2 = w.name(), w.tag("w1"), w.tag("w2")
    w.start(name, [w.gate(hold1), w.gate(hold2), result("after")], watchdog_ms=50)
    ch = w.agents.channel()

    with Telemetry(name) as tel:
        told = w.agents.tell_with_completion(name, "slow", ch)
        told_end = w.messages(ch, is_completion(told))
        with pytest.raises(TurnFailed) as asked:
            w.agents.ask(name, "slow too", timeout=WAIT)
        after = w.agents.ask(name, "quick", timeout=WAIT)

    assert completions(told_end) == [(told, ("error", "timeout"))]
    assert asked.value.reason == "timeout"
    assert after.text == "after"
    errors = tel.of("turn", "error")
    assert [(e["reason_kind"], e["attempt"]) for e in errors] == [("timeout", 1)] * 2
    assert all(e["duration_ms"] >= 50 for e in errors), errors
    assert errors[0]["ref"] == told
    assert w.agents.receive(ch, 0.2) is None  # one completion, no late one
