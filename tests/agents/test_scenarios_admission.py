"""GenAgent §4.5 scenarios 6, 8 and 12: bounded admission, notify vs notify_ack, and
cancelling queued requests."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from hypha_celery.agents import NoReply, Overloaded, Prompt, TurnError
from tests.agents.support import (
    Blocker,
    Telemetry,
    World,
    behave,
    prompts,
    result,
    texts,
    trace,
)
from tests.runtime.support import WAIT, wait_until

TEN = "x" * 10  # 12 bytes as JSON
DEFAULT_BYTES = 1_048_576


def overload(limit: str, count: int, max_count: int, max_bytes: int = DEFAULT_BYTES,
             queue: str = "prompts") -> dict[str, Any]:
    return {"queue": queue, "limit": limit, "pending_count": count,
            "pending_bytes": 12 * count, "incoming_bytes": 12, "max_count": max_count,
            "max_bytes": max_bytes}


# -- 6 --------------------------------------------------------------------------------
def test_6_one_active_one_queued_then_overloaded_without_a_ref(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold), result(), result()], max_pending_prompts=1)
    done, stream = w.agents.channel(), w.agents.channel()

    with Telemetry(name) as tel:
        active = w.agents.tell(name, TEN)
        w.blocked(hold)
        queued = w.agents.tell(name, TEN)
        with pytest.raises(Overloaded) as told:
            w.agents.tell(name, TEN)
        with pytest.raises(Overloaded) as asked:
            w.agents.ask(name, TEN, timeout=WAIT)
        with pytest.raises(Overloaded) as completing:
            w.agents.tell_with_completion(name, TEN, done, stream_to=stream)

    for refused in (told, asked, completing):
        assert refused.value.info == overload("count", 1, 1)
    assert w.status(name).queued == 1
    rejected = tel.of("turn", "rejected")
    assert [r["reason_kind"] for r in rejected] == ["overloaded"] * 3
    assert not {r["ref"] for r in rejected} & {active, queued}
    assert [t for t in tel.turns() if t[0] != "rejected"] == [("start", active, 1)]
    w.release(hold)
    assert w.settled(name, queued).status == "completed"
    assert w.agents.receive(done, 0.1) is None and w.agents.receive(stream, 0.1) is None


def test_6_twenty_concurrent_tells_against_a_cap_of_three(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold)] + [result()] * 3, max_pending_prompts=3)
    w.agents.tell(name, "first")
    w.blocked(hold)
    barrier = threading.Barrier(20)

    def one(_: int) -> tuple[str, Any]:
        barrier.wait(WAIT)
        try:
            return "accepted", w.agents.tell(name, TEN)
        except Overloaded as exc:
            return "overloaded", exc.info

    with ThreadPoolExecutor(20) as pool:
        outs = list(pool.map(one, range(20)))

    accepted = [v for k, v in outs if k == "accepted"]
    refused = [v for k, v in outs if k == "overloaded"]
    assert (len(accepted), len(refused)) == (3, 17)
    assert len(set(accepted)) == 3
    assert all(info == overload("count", 3, 3) for info in refused)
    assert w.agents.runtime_snapshot(name)["pending_prompts"] == 3


@pytest.mark.parametrize(("limits", "fits", "expected"), [
    ({"max_pending_prompt_bytes": 30}, 2, overload("bytes", 2, 1_000, max_bytes=30)),
    ({"max_pending_prompts": 0}, 0, overload("count", 0, 0)),
])
def test_6_byte_caps_and_zero_caps(w: World, limits: dict[str, int], fits: int,
                                   expected: dict[str, Any]) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold)] + [result()] * fits, **limits)
    wait_until(lambda: w.agents.whereis(name).phase == "idle")  # pre_run done
    w.agents.tell(name, "first")  # an idle agent takes it at once, whatever the queue bound
    w.blocked(hold)

    queued = [w.agents.tell(name, TEN) for _ in range(fits)]
    with pytest.raises(Overloaded) as refused:
        w.agents.tell(name, TEN)

    assert refused.value.info == expected
    assert w.agents.runtime_snapshot(name)["pending_prompts"] == len(queued)


def test_6_a_zero_cap_tell_waits_for_pre_run_instead_of_being_refused(w: World) -> None:
    """GenAgent: ``pre_run`` does not block ``start`` but synchronous calls wait for it; the
    agent is then idle, so a tell is dispatched at once even with ``max_pending_prompts=0``
    (0 disables the queue, not the agent)."""
    name, blocker = w.name(), Blocker()

    def slow_pre_run(s: Any) -> Any:
        blocker.block()
        return s

    behave(name, pre_run=slow_pre_run)
    w.start(name, [result("first")], max_pending_prompts=0)
    blocker.wait_entered()

    # The tell is made while pre_run is still blocked. A core that makes it wait for
    # pre_run (as GenAgent does) is let go by the fallback: the blocker opens once the
    # tell returned or after half a second.
    returned = threading.Event()
    releaser = threading.Thread(target=lambda: (returned.wait(0.5), blocker.go.set()))
    releaser.start()
    try:
        ref = w.agents.tell(name, "first")
    finally:
        returned.set()
        releaser.join()

    assert w.settled(name, ref).status == "completed"


# -- 8 --------------------------------------------------------------------------------
def test_8_notify_is_ok_when_full_but_notify_ack_is_overloaded(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold)], max_pending_notifications=1)
    w.agents.tell(name, "A")
    w.blocked(hold)

    with Telemetry(name) as tel:
        w.agents.notify_ack(name, {"note": 1})
        with pytest.raises(Overloaded) as full:
            w.agents.notify_ack(name, {"note": 2})
        assert w.agents.notify(name, {"note": 3}) is None
        rejected = tel.of("input", "rejected")

    info = full.value.info
    assert (info["queue"], info["limit"], info["pending_count"], info["max_count"]) == (
        "notifications", "count", 1, 1)
    assert [r["reason"] for r in rejected] == ["overloaded"]
    w.release(hold)
    # one status read: "idle" read before the note was taken, then the trace, would let a
    # second read see the note's turn still running
    wait_until(lambda: trace(name, "handle_event") and _idle_with(w, name, [1]))


def _idle_with(w: World, name: str, notes: list[int]) -> bool:
    status = w.status(name)
    return status.state == "idle" and status.agent_state.get("notes") == notes


def test_8_an_event_prompt_that_cannot_be_queued_goes_to_handle_error(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A")), result("B")], max_pending_prompts=1)
    behave(name, handle_error=lambda ref, err, s: NoReply({**s, "error": [err.reason,
                                                                           err.info]}))
    a = w.agents.tell(name, "A")
    w.blocked(hold)
    b = w.agents.tell(name, TEN)  # fills the queue

    w.agents.notify_ack(name, {"prompt": "from event"})
    w.release(hold)

    assert w.settled(name, b).status == "completed"
    wait_until(lambda: w.status(name).state == "idle")
    assert w.status(name).agent_state["error"] == [
        "overloaded", {**overload("count", 1, 1), "incoming_bytes": 12}]
    assert [e[0] for e in trace(name, "handle_response", "handle_event", "handle_error")] == [
        "handle_response", "handle_event", "handle_error", "handle_response"]
    assert prompts(name) == ["A", TEN]  # the event's prompt was never dispatched
    assert w.agents.poll(name, a).status == "completed"


# -- 12 -------------------------------------------------------------------------------
@pytest.mark.parametrize("limits", [{"max_pending_prompts": 1},
                                    {"max_pending_prompt_bytes": 12}],
                         ids=["count", "bytes"])
def test_12_cancelling_a_queued_tell(w: World, limits: dict[str, int]) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A")), result("C")], **limits)
    done, stream = w.agents.channel(), w.agents.channel()
    with Telemetry(name) as tel:
        a = w.agents.tell(name, "A")
        w.blocked(hold)
        b = w.agents.tell_with_completion(name, "B" * 10, done, stream_to=stream)
        with pytest.raises(Overloaded):
            w.agents.tell(name, "C" * 10)

        assert w.agents.cancel_request(name, b) == "cancelled"
        assert w.agents.runtime_snapshot(name)["pending_prompts"] == 0
        c = w.agents.tell(name, "C" * 10)  # its count and bytes are free again
        assert w.agents.cancel_request(name, b) == "cancelled"  # idempotent
        assert w.agents.cancel_request(name, a) == "current"
        w.release(hold)
        assert w.settled(name, c).status == "completed"

    poll = w.agents.poll(name, b)
    assert (poll.status, poll.reason) == ("error", "cancelled")
    msg = w.agents.receive(done, WAIT)
    assert msg is not None and msg["outcome"] == {"error": "cancelled", "info": {}}
    assert w.agents.receive(done, 0.1) is None and w.agents.receive(stream, 0.1) is None
    assert prompts(name) == ["A", "C" * 10]
    assert b not in {e[1] for e in trace(name, "handle_response", "handle_error",
                                         "post_turn")}
    assert [(c["ref"], c["reason_kind"]) for c in tel.of("turn", "cancelled")] == [
        (b, "caller_cancelled")]
    assert b not in {ref for what, ref, _ in tel.turns() if what != "cancelled"}
    assert w.agents.cancel_request(name, a) == "already_finished"


def test_12_unknown_ask_and_pruned_refs_are_not_found(w: World) -> None:
    name = w.name()
    w.start(name, [result("asked"), result("t1"), result("t2")], max_tell_results=1)
    w.agents.ask(name, "q", timeout=WAIT)
    ask_ref = trace(name, "handle_response")[0][1]
    t1 = w.agents.tell(name, "t1")
    w.settled(name, t1)
    t2 = w.agents.tell(name, "t2")
    w.settled(name, t2)

    assert w.agents.cancel_request(name, "no-such-ref") == "not_found"
    assert w.agents.cancel_request(name, ask_ref) == "not_found"
    assert w.agents.cancel_request(name, t1) == "not_found"  # pruned by max_tell_results
    assert w.agents.cancel_request(name, t2) == "already_finished"


def test_12_cancelling_a_pending_caller_owned_retry(w: World) -> None:
    name, hold, blocker = w.name(), w.tag(), Blocker()
    w.start(name, [w.gate(hold, texts(end="boom")), result("never")])

    def retry(ref: str, err: TurnError, s: Any) -> Prompt | NoReply:
        return Prompt("retry", s) if err.reason == "boom" else NoReply(s)

    def hold_pump(event: Any, s: Any) -> NoReply:
        blocker.block()
        return NoReply(s)

    behave(name, handle_error=retry, handle_event=hold_pump)
    done = w.agents.channel()
    a = w.agents.tell_with_completion(name, "A", done)
    w.blocked(hold)
    w.agents.notify_ack(name, {"note": "keeps the pump busy"})
    w.release(hold)
    blocker.wait_entered()  # A failed; its retry waits behind the notification
    assert w.agents.runtime_snapshot(name)["self_chain_pending"] is True
    assert w.agents.poll(name, a).status == "pending"

    assert w.agents.cancel_request(name, a) == "cancelled"
    blocker.go.set()

    msg = w.agents.receive(done, WAIT)
    assert msg is not None and msg["outcome"] == {"error": "cancelled", "info": {}}
    assert w.agents.poll(name, a).reason == "cancelled"
    wait_until(lambda: w.status(name).state == "idle"
               and not w.agents.runtime_snapshot(name)["self_chain_pending"])
    assert prompts(name) == ["A"]  # the retry was never dispatched
    assert w.agents.receive(done, 0.1) is None
