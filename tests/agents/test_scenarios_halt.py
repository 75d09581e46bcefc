"""GenAgent §4.5 scenarios 7, 9, 10 and 11: notify deferral, halt ordering, external halt
and resume, ``on_halt="fail"``; and §1.7's ``transition_to_halted`` funnel."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery.agents import AgentError, Halt, NoReply
from tests.agents.support import (
    Blocker,
    Telemetry,
    World,
    behave,
    is_completion,
    outcome_of,
    prompts,
    result,
    seen,
    trace,
)
from tests.runtime.support import WAIT, wait_until


def steps(name: str) -> list[tuple[Any, ...]]:
    """The decision-level trace: callbacks and halted telemetry, refs left out."""
    found = trace(name, "pre_turn", "handle_response", "handle_error", "post_turn",
                  "handle_event", "post_run", "telemetry:halted")
    return [(e[0], e[-1]) if e[0] in ("pre_turn", "handle_event") else (e[0],) for e in found]


def idle(w: World, name: str) -> None:
    """Wait until nobody works on the agent (no turn, no pending pump)."""
    wait_until(lambda: (info := w.agents.whereis(name)) is not None and info.phase != "busy",
               what=f"{name} to go idle")


def halted(w: World, name: str) -> None:
    """Wait until the halt is complete: ``post_run`` ran (it runs just after the flag is
    stored) and the agent is halted."""
    wait_until(lambda: trace(name, "post_run") and w.status(name).halted,
               what=f"{name} to halt")


# -- 7 --------------------------------------------------------------------------------
def test_7_notifications_during_a_turn_apply_after_it_in_arrival_order(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A")), result("from event")])
    w.agents.tell(name, "A")
    w.blocked(hold)

    for event in ({"note": 1}, {"note": 2}, {"prompt": "from event"}):
        w.agents.notify_ack(name, event)
    assert w.status(name).agent_state["notes"] == []  # deferred
    w.release(hold)

    wait_until(lambda: len(trace(name, "post_turn")) == 2)
    idle(w, name)
    assert steps(name) == [
        ("pre_turn", "A"), ("handle_response",), ("post_turn",),
        ("handle_event", {"note": 1}), ("handle_event", {"note": 2}),
        ("handle_event", {"prompt": "from event"}),
        ("pre_turn", "from event"), ("handle_response",), ("post_turn",)]
    assert w.status(name).agent_state["notes"] == [1, 2]  # the events' changes survive
    assert seen(name, "handle_response")[1]["notes"] == [1, 2]


def test_7_a_buffered_halt_takes_effect_after_the_turn(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A")), result("B")])
    a = w.agents.tell(name, "A")
    w.blocked(hold)
    w.agents.notify_ack(name, {"halt": True})
    b = w.agents.tell(name, "B")
    assert w.status(name).halted is False

    w.release(hold)

    halted(w, name)
    assert w.agents.poll(name, a).status == "completed"
    assert w.agents.poll(name, b).status == "pending"
    assert steps(name) == [("pre_turn", "A"), ("handle_response",), ("post_turn",),
                           ("handle_event", {"halt": True}), ("post_run",)]


def test_7_an_idle_notify_is_handled_without_a_turn(w: World) -> None:
    name = w.name()
    w.start(name, [])
    idle(w, name)

    w.agents.notify(name, {"note": "idle"})

    wait_until(lambda: w.status(name).agent_state["notes"] == ["idle"])
    assert prompts(name) == []


# -- 9 --------------------------------------------------------------------------------
def test_9_halt_ordering_with_three_buffered_notifications(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A"))])
    with Telemetry(name):
        w.agents.tell(name, "A")
        w.blocked(hold)
        for event in ({"note": 1}, {"note": 2, "halt": True}, {"note": 3}):
            w.agents.notify_ack(name, event)

        w.release(hold)
        wait_until(lambda: trace(name, "telemetry:halted"))
        w.agents.notify_ack(name, {"note": 4})  # later events: state changes, no post_run
        wait_until(lambda: w.status(name).agent_state["notes"] == [1, 2, 3, 4])

    assert [s[0] for s in steps(name)] == [
        "pre_turn", "handle_response", "post_turn", "handle_event", "handle_event",
        "handle_event", "post_run", "telemetry:halted", "handle_event"]
    assert seen(name, "post_run")[0]["notes"] == [1, 2, 3]  # after all three events
    assert w.status(name).halted is True


# -- 10 -------------------------------------------------------------------------------
def test_10_external_halt_mid_turn_keeps_queued_work_until_resume(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A")), result("B")])
    a = w.agents.tell(name, "A")
    w.blocked(hold)
    b = w.agents.tell(name, "B")

    w.agents.halt(name)
    st = w.status(name)
    assert (st.halt_pending, st.halted) == (True, False)
    w.release(hold)

    halted(w, name)
    assert w.agents.poll(name, a).status == "completed"
    assert w.agents.poll(name, b).status == "pending"
    st = w.status(name)
    assert (st.queued, st.halt_pending) == (1, False)
    assert len(trace(name, "post_run")) == 1

    w.agents.resume(name)

    assert w.settled(name, b).status == "completed"
    assert len(trace(name, "post_run")) == 1
    assert prompts(name) == ["A", "B"]


def test_10_resume_during_the_turn_cancels_the_pending_halt(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A")), result("B")])
    w.agents.tell(name, "A")
    w.blocked(hold)
    b = w.agents.tell(name, "B")

    w.agents.halt(name)
    w.agents.resume(name)
    assert w.status(name).halt_pending is False
    w.release(hold)

    assert w.settled(name, b).status == "completed"
    idle(w, name)
    assert w.status(name).halted is False
    assert trace(name, "post_run") == []


def test_10_resume_after_halting_an_agent_with_no_turn_leaves_it_running(w: World) -> None:
    """GenAgent: a halt while no turn runs halts the agent at once (``post_run`` runs), and
    a later resume un-halts it. Here the pump is busy with a notification when halt and
    resume arrive, in that order; the agent must end up running."""
    name, blocker = w.name(), Blocker()

    def hold_pump(event: Any, s: Any) -> NoReply:
        blocker.block()
        return NoReply(s)

    behave(name, handle_event=hold_pump)
    w.start(name, [result("after")])
    w.agents.notify_ack(name, {"note": "busy"})
    blocker.wait_entered()

    w.agents.halt(name)
    w.agents.resume(name)
    blocker.go.set()

    idle(w, name)
    assert w.status(name).halted is False
    ref = w.agents.tell(name, "after")
    assert w.settled(name, ref).status == "completed"


# -- 11 -------------------------------------------------------------------------------
def test_11_on_halt_fail_completes_queued_opted_in_tells_with_halted(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A")), result("C"), result("E")])
    ch = w.agents.channel()
    w.agents.tell(name, "A")
    w.blocked(hold)
    b = w.agents.tell_with_completion(name, "B", ch, on_halt="fail")
    c = w.agents.tell(name, "C")
    d = w.agents.tell_with_completion(name, "D", ch, on_halt="fail")
    e = w.agents.tell(name, "E")

    w.agents.halt(name)
    w.release(hold)

    msgs = w.messages(ch, is_completion(d))
    assert [(m["ref"], outcome_of(m)) for m in msgs] == [
        (b, ("error", "halted")), (d, ("error", "halted"))]
    halted(w, name)
    for ref in (b, d):
        assert w.agents.poll(name, ref).reason == "halted"
    assert [w.agents.poll(name, ref).status for ref in (c, e)] == ["pending", "pending"]
    assert w.status(name).queued == 2
    with pytest.raises(AgentError) as refused:
        w.agents.tell_with_completion(name, "F", ch, on_halt="fail")
    assert refused.value.reason == "halted"

    w.agents.resume(name)

    assert w.settled(name, e).status == "completed"
    assert w.agents.poll(name, c).status == "completed"
    assert prompts(name) == ["A", "C", "E"]  # FIFO kept; B, D never dispatched
    assert w.agents.receive(ch, 0.1) is None  # exactly one completion each


def test_11_a_halting_decision_fails_opted_in_tells_too(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A")), result("C")])
    behave(name, handle_response=lambda ref, resp, s: Halt(s))
    ch = w.agents.channel()
    w.agents.tell(name, "A")
    w.blocked(hold)
    b = w.agents.tell_with_completion(name, "B", ch, on_halt="fail")
    c = w.agents.tell_with_completion(name, "C", ch)  # on_halt="queue"

    w.release(hold)

    msg = w.agents.receive(ch, WAIT)
    assert msg is not None and (msg["ref"], outcome_of(msg)) == (b, ("error", "halted"))
    halted(w, name)
    assert w.agents.poll(name, c).status == "pending"
    assert len(trace(name, "post_run")) == 1
