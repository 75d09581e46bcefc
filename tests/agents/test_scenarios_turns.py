"""GenAgent §4.5 scenarios 16-19 (caller-owned retry, event capture, stream relay,
stream-callback state) and the turn-level rules of §1.7 (one turn at a time; decision,
post_turn, record, notifications, pending halt, idle; the self-chain before the FIFO)."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from hypha_celery.agents import NoReply, Overloaded, Prompt, Response, TurnError, TurnFailed
from hypha_celery.backends import BackendEvent
from tests.agents.support import (
    Telemetry,
    World,
    behave,
    crashing_after,
    held_after,
    is_completion,
    outcome_of,
    prompts,
    result,
    seen,
    texts,
    trace,
)
from tests.runtime.support import WAIT, wait_until


def retry_boom(ref: str, err: TurnError, s: Any) -> Prompt | NoReply:
    return Prompt("retry", s) if err.reason == "boom" else NoReply(s)


def shape(msgs: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """``(type, ref, text or outcome)`` of channel messages."""
    return [(m["type"], m["ref"], m["event"]["data"].get("text") if m["type"] == "event"
             else outcome_of(m)) for m in msgs]


# -- 16 -------------------------------------------------------------------------------
def test_16_caller_owned_retry_keeps_the_ref_and_completes_once(w: World) -> None:
    name, first, second = w.name(), w.tag("first"), w.tag("second")
    w.start(name, [w.gate(first, texts("partial", end="boom")),
                   w.gate(second, result("retried")), result("Q")])
    behave(name, handle_error=retry_boom)
    ch = w.agents.channel()

    with Telemetry(name) as tel, ThreadPoolExecutor(1) as pool:
        a = w.agents.tell_with_completion(name, "A", ch)
        w.blocked(first)
        asked = pool.submit(w.agents.ask, name, "Q", WAIT)
        wait_until(lambda: w.status(name).queued == 1)
        w.release(first)
        w.blocked(second)

        current = w.agents.runtime_snapshot(name)["current_request"]
        assert (current["ref"], current["attempt"], current["origin"]) == (a, 2, "tell")
        assert w.agents.poll(name, a).status == "pending"
        w.release(second)
        assert asked.result(WAIT).text == "Q"

    msgs = w.messages(ch, is_completion(a))
    assert shape(msgs) == [("completion", a, ("ok", "retried"))]
    assert [t for t in tel.turns() if t[1] == a] == [
        ("start", a, 1), ("error", a, 1), ("start", a, 2), ("stop", a, 2)]
    assert [e[2] for e in trace(name, "post_turn") if e[1] == a] == ["boom", "ok"]
    assert prompts(name) == ["A", "retry", "Q"]  # the retry runs ahead of the queued ask
    assert w.agents.receive(ch, 0.1) is None


def test_16_an_ask_retry_answers_the_asker_once(w: World) -> None:
    name = w.name()
    w.start(name, [texts(end="boom"), result("second time")])
    behave(name, handle_error=retry_boom)

    assert w.agents.ask(name, "A", timeout=WAIT).text == "second time"

    decided = trace(name, "handle_error", "handle_response")
    assert [e[0] for e in decided] == ["handle_error", "handle_response"]
    assert decided[0][1] == decided[1][1]  # the same ref


def test_16_an_interrupt_ends_ownership_and_the_follow_up_gets_a_new_ref(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold), result("follow")])
    behave(name, handle_error=lambda ref, err, s: Prompt("follow-up", s))
    ch = w.agents.channel()

    with Telemetry(name) as tel:
        a = w.agents.tell_with_completion(name, "A", ch)
        w.blocked(hold)
        assert w.agents.interrupt_request(name, a) == "accepted"
        msgs = w.messages(ch, is_completion(a))
        wait_until(lambda: tel.of("turn", "stop"))

    assert shape(msgs) == [("completion", a, ("error", "interrupted"))]
    starts = [(s["ref"], s["origin"], s["attempt"]) for s in tel.of("turn", "start")]
    assert starts[0] == (a, "tell", 1)
    follow = starts[1][0]
    assert starts[1:] == [(follow, "self_chain", 1)] and follow != a
    assert w.agents.poll(name, a).reason == "interrupted"
    assert trace(name, "handle_response") == [("handle_response", follow, "follow")]


# -- 17 -------------------------------------------------------------------------------
def test_17_compact_capture_keeps_a_prefix_and_the_full_text(w: World) -> None:
    name = w.name()
    w.start(name, [texts("a", "b", "c", "d", "e")], max_events_per_turn=2)

    response = w.agents.ask(name, "go", timeout=WAIT)

    assert [e.data["text"] for e in response.events] == ["a", "b"]
    assert response.event_coverage == {
        "mode": "compact", "observed_events": 6, "retained_events": 2, "omitted_events": 4,
        "retained_bytes": sum(e.size for e in response.events),
        "first_omission": {"limit": "events", "event_kind": "text"}}
    assert response.text == "abcde"
    assert response.terminal.kind == "result"
    assert [e[1] for e in trace(name, "stream")] == ["text"] * 5 + ["result"]


def test_17_lossless_capture_fails_without_payload_and_the_next_turn_works(
        w: World) -> None:
    name = w.name()
    events = texts("SECRET-a", "SECRET-b", "SECRET-c")
    w.start(name, [events, result("next")], max_events_per_turn=2,
            event_retention="lossless")

    with pytest.raises(TurnFailed) as failed:
        w.agents.ask(name, "go", timeout=WAIT)

    assert failed.value.reason == "event_capture_overflow"
    assert failed.value.info == {
        "limit": "events", "max_events": 2, "max_bytes": 1_048_576, "retained_events": 2,
        "retained_bytes": events[0].size + events[1].size, "rejected_event_kind": "text",
        "rejected_event_bytes": events[2].size}
    assert "SECRET" not in json.dumps(failed.value.info)
    assert [e[2] for e in trace(name, "stream")] == ["SECRET-a", "SECRET-b"]
    assert w.agents.ask(name, "again", timeout=WAIT).text == "next"


# -- 18 -------------------------------------------------------------------------------
def test_18_events_arrive_in_order_before_their_completion(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, texts("a1", "a2")), texts("b1", "b2")])
    ch_a, ch_b = w.agents.channel(), w.agents.channel()
    a = w.agents.tell_with_completion(name, "A", ch_a, stream_to=ch_a)
    w.blocked(hold)
    b = w.agents.tell_with_completion(name, "B", ch_b, stream_to=ch_b)

    w.release(hold)

    assert shape(w.messages(ch_a, is_completion(a))) == [
        ("event", a, "a1"), ("event", a, "a2"), ("event", a, None),
        ("completion", a, ("ok", "a1a2"))]
    assert shape(w.messages(ch_b, is_completion(b))) == [
        ("event", b, "b1"), ("event", b, "b2"), ("event", b, None),
        ("completion", b, ("ok", "b1b2"))]


def test_18_requests_that_never_start_stream_nothing(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, texts("a")), texts("never")], max_pending_prompts=2)
    behave(name, pre_turn=lambda p, s: NoReply(s) if p == "skip" else Prompt(p, s))
    done = w.agents.channel()
    streams = {k: w.agents.channel() for k in ("cancelled", "skipped", "overloaded")}
    w.agents.tell_with_completion(name, "A", done)
    w.blocked(hold)
    cancelled = w.agents.tell_with_completion(name, "C", done, stream_to=streams["cancelled"])
    skipped = w.agents.tell_with_completion(name, "skip", done, stream_to=streams["skipped"])
    with pytest.raises(Overloaded):
        w.agents.tell_with_completion(name, "O", done, stream_to=streams["overloaded"])

    assert w.agents.cancel_request(name, cancelled) == "cancelled"
    w.release(hold)

    assert w.completion(done, skipped) == {"error": "pre_turn_skipped", "info": {}}
    for ch in streams.values():
        assert w.agents.receive(ch, 0.1) is None


@pytest.mark.parametrize("how", ["interrupt", "watchdog"])
def test_18_nothing_is_relayed_after_an_interrupt_or_watchdog(w: World, how: str) -> None:
    name, hold = w.name(), w.tag()
    script = held_after(hold, texts("before", end=None), texts("after"))
    w.start(name, [script], **({"watchdog_ms": 500} if how == "watchdog" else {}))
    ch = w.agents.channel()
    a = w.agents.tell_with_completion(name, "A", ch, stream_to=ch)
    w.blocked(hold)
    if how == "interrupt":
        assert w.agents.interrupt_request(name, a) == "accepted"

    msgs = w.messages(ch, is_completion(a))
    w.release(hold)

    reason = "interrupted" if how == "interrupt" else "timeout"
    assert shape(msgs) == [("event", a, "before"), ("completion", a, ("error", reason))]
    wait_until(lambda: ("stream", "result", None) in trace(name, "stream"),
               what="the abandoned stream to run to its end")
    assert w.agents.receive(ch, 0.2) is None


def test_18_nothing_is_relayed_once_interrupt_request_was_accepted(w: World) -> None:
    """The request ends when the interrupt is accepted (GenAgent kills the task in the
    same call); events the abandoned stream produces afterwards must not be relayed, even
    before the owning worker notices."""
    name, hold = w.name(), w.tag()
    w.start(name, [held_after(hold, [], texts("after"))])
    ch = w.agents.channel()
    a = w.agents.tell_with_completion(name, "A", ch, stream_to=ch)
    w.blocked(hold)

    assert w.agents.interrupt_request(name, a) == "accepted"
    w.release(hold)

    assert shape(w.messages(ch, is_completion(a))) == [
        ("completion", a, ("error", "interrupted"))]


def test_18_nothing_is_relayed_after_the_agent_stopped(w: World) -> None:
    """A stopped agent's active request has ended: its abandoned stream relays nothing."""
    name, hold = w.name(), w.tag()
    w.start(name, [held_after(hold, [], texts("after"))])
    ch = w.agents.channel()
    w.agents.tell_with_completion(name, "A", ch, stream_to=ch)
    w.blocked(hold)

    w.agents.stop(name)
    w.release(hold)

    wait_until(lambda: ("stream", "result", None) in trace(name, "stream"),
               what="the abandoned stream to run to its end")
    assert w.agents.receive(ch, 0.2) is None


def test_18_a_recipient_nobody_reads_does_not_hurt_the_agent(w: World) -> None:
    name = w.name()
    w.start(name, [texts("x" * 1000, "y" * 1000), result("next")])
    unread = w.agents.channel()

    w.agents.tell_with_completion(name, "A", unread, stream_to=unread)

    assert w.agents.ask(name, "B", timeout=WAIT).text == "next"


# -- 19 -------------------------------------------------------------------------------
SUCCESS_ERROR_EOF: list[tuple[Callable[[], list[BackendEvent]], str, int]] = [
    (lambda: texts("a", "b"), "handle_response", 3),
    (lambda: texts("a", "b", end="boom"), "handle_error", 3),
    (lambda: texts("a", "b", end=None), "handle_error", 2),
]


@pytest.mark.parametrize(("script", "callback", "streamed"), SUCCESS_ERROR_EOF,
                         ids=["success", "error_event", "eof"])
def test_19_the_stream_state_reaches_the_decision_and_post_turn(
        w: World, script: Callable[[], list[BackendEvent]], callback: str, streamed: int) -> None:
    name = w.name()
    w.start(name, [script()])

    ref = w.agents.tell(name, "go")
    w.settled(name, ref)

    assert seen(name, callback)[0]["streamed"] == streamed
    wait_until(lambda: seen(name, "post_turn"))
    assert seen(name, "post_turn")[0]["streamed"] == streamed
    wait_until(lambda: w.status(name).state == "idle")
    assert w.status(name).agent_state["streamed"] == streamed


@pytest.mark.parametrize("how", ["interrupt", "crash", "watchdog"])
def test_19_interrupt_crash_and_watchdog_fall_back_to_the_pre_turn_state(
        w: World, how: str) -> None:
    name, hold = w.name(), w.tag()
    script = (crashing_after(texts("a", end=None)) if how == "crash"
              else held_after(hold, texts("a", end=None), texts("b")))
    w.start(name, [script], **({"watchdog_ms": 500} if how == "watchdog" else {}))

    ref = w.agents.tell(name, "go")
    if how != "crash":
        w.blocked(hold)  # the stream callback has seen "a" by now
        assert w.status(name).agent_state["streamed"] == 0  # the retained state
    if how == "interrupt":
        assert w.agents.interrupt_request(name, ref) == "accepted"
    poll = w.settled(name, ref)

    expected = {"interrupt": "interrupted", "crash": "task_crashed", "watchdog": "timeout"}
    assert poll.reason == expected[how]
    assert ("stream", "text", "a") in trace(name, "stream")
    assert seen(name, "handle_error")[0]["streamed"] == 0
    wait_until(lambda: seen(name, "post_turn"))
    assert seen(name, "post_turn")[0]["streamed"] == 0


# -- §1.7 -----------------------------------------------------------------------------
def test_rule_one_turn_at_a_time(w: World) -> None:
    name = w.name()
    w.start(name, [result(str(i)) for i in range(6)])

    with Telemetry(name) as tel, ThreadPoolExecutor(6) as pool:
        refs = list(pool.map(lambda i: w.agents.tell(name, f"t{i}"), range(6)))
        for ref in refs:
            w.settled(name, ref)
        wait_until(lambda: len(tel.of("turn", "stop")) == 6)

    kinds = [what for what, _, _ in tel.turns()]
    assert kinds == ["start", "stop"] * 6


def test_rule_a_turn_ends_decision_post_turn_record_notifications_halt(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A"))])
    ch = w.agents.channel()
    polled: list[str] = []

    def decide(ref: str, response: Response, s: Any) -> NoReply:
        return NoReply({**s, "decided": True})

    def event_sees_the_record(event: Any, s: Any) -> NoReply:
        polled.append(w.agents.poll(name, a).status)
        return NoReply(s)

    behave(name, handle_response=decide, handle_event=event_sees_the_record)
    with Telemetry(name):
        a = w.agents.tell_with_completion(name, "A", ch)
        w.blocked(hold)
        w.agents.notify_ack(name, {"note": 1})
        w.agents.halt(name)
        w.release(hold)

        msg = w.messages(ch, is_completion(a))[-1]
        assert ("post_turn", a, "ok") in trace(name, "post_turn")  # before the completion
        wait_until(lambda: trace(name, "telemetry:halted"))

    assert outcome_of(msg) == ("ok", "A")
    assert seen(name, "post_turn")[0]["decided"] is True  # the post-decision state
    assert polled == ["completed"]  # recorded before the notifications were drained
    assert [e[0] for e in trace(name, "handle_response", "post_turn", "handle_event",
                                "post_run", "telemetry:halted")] == [
        "handle_response", "post_turn", "handle_event", "post_run", "telemetry:halted"]
    assert w.status(name).state == "idle" and w.status(name).halted


def test_rule_the_self_chain_runs_before_the_fifo(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A")), result("chain"), result("B")])
    behave(name, handle_response=lambda ref, resp, s: (
        Prompt("chain", s) if resp.text == "A" else NoReply(s)))

    with Telemetry(name) as tel:
        w.agents.tell(name, "A")
        w.blocked(hold)
        b = w.agents.tell(name, "B")
        w.release(hold)
        w.settled(name, b)

    assert prompts(name) == ["A", "chain", "B"]
    assert [s["origin"] for s in tel.of("turn", "start")] == ["tell", "self_chain", "tell"]


def test_an_agents_events_keep_their_json(w: World) -> None:
    """Written as payload models, stored as they always were: ids, origins, reasons."""
    name = w.name()
    w.start(name, [result("one")])
    assert w.agents.ask(name, "hello", timeout=WAIT).text == "one"
    incarnation = w.agents.whereis(name).incarnation
    wait_until(lambda: len(w.h.store.events(incarnation)) >= 3)
    events = [(e.kind, e.data) for e in w.h.store.events(incarnation)]
    (kind, started), (_, begun), (_, done) = events[:3]
    assert kind == "agent.started" and set(started) == {"name", "kind"}
    assert started["name"] == name
    assert begun == done == {"ref": begun["ref"], "attempt": 1, "origin": "ask"}
    assert [k for k, _ in events[1:3]] == ["agent.turn.started", "agent.turn.completed"]
