"""GenAgent §4.5 scenarios 13, 14, 15 and 20: a dead queued-ask caller, drain, graceful
stop (and self-stop), and robustness of malformed callbacks (the redaction sentinels are
in test_redaction.py; a caller process SIGKILLed is in tests/integration/test_agents.py).

Not ported: GenAgent's ``unknown_request`` and ``handle_info`` have no counterpart in this
API."""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from hypha_celery import Hypha, Settings, WaitTimeout
from hypha_celery.agents import AgentError, NoReply, Poll, Prompt, TurnFailed, current_name
from tests.agents.support import (
    Telemetry,
    World,
    behave,
    is_completion,
    outcome_of,
    prompts,
    result,
    texts,
    trace,
)
from tests.runtime.support import WAIT, wait_until

SECRET = "sk-test-SECRET-123"
ANSWER = 5.0  # an ask whose agent stops is answered at once; this only bounds a failure


# -- 13 -------------------------------------------------------------------------------
def test_13_a_queued_ask_whose_caller_is_gone_is_dropped_unrun(
        w: World, sqlite_url: str) -> None:
    """The caller here is another client that closes (its caller lease is deleted); a
    caller whose ask timed out but that lives on leaves its ask in place."""
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("first")), result("kept")])
    w.agents.tell(name, "first")
    w.blocked(hold)
    other = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=False))
    with Telemetry(name) as tel:
        with pytest.raises(WaitTimeout):
            w.agents.ask(name, "live caller", timeout=0.2)
        with pytest.raises(WaitTimeout):
            other.agents.ask(name, "gone caller", timeout=0.2)
        assert w.status(name).queued == 2
        other.close()
        w.release(hold)
        wait_until(lambda: w.status(name).state == "idle" and w.status(name).queued == 0)

    assert prompts(name) == ["first", "live caller"]  # the gone caller's ask never ran
    (cancelled,) = tel.of("turn", "cancelled")
    assert cancelled["reason_kind"] == "caller_down" and cancelled["origin"] == "ask"
    assert cancelled["ref"] not in {ref for what, ref, _ in tel.turns() if what != "cancelled"}
    incarnation = w.agents.whereis(name).incarnation
    dropped = [e.data for e in w.h.store.events(incarnation)
               if e.kind == "agent.request.cancelled"]
    assert dropped == [{"ref": cancelled["ref"], "reason": "caller_down"}]
    assert w.agents.poll(name, cancelled["ref"]) == Poll("error", reason="not_found")


def test_13_a_stalled_caller_that_comes_back_gets_caller_down(w: World) -> None:
    """A caller whose lease went stale (here: deleted under it) while it still waits is
    answered ``caller_down`` rather than left waiting forever."""
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("first"))])
    w.agents.tell(name, "first")
    w.blocked(hold)
    with ThreadPoolExecutor(1) as pool:
        asked = pool.submit(w.agents.ask, name, "stalled", WAIT)
        wait_until(lambda: w.status(name).queued == 1)
        w.h.store.drop_leases([f"caller:{w.agents._caller.id}"])
        w.release(hold)
        with pytest.raises(TurnFailed) as failed:
            asked.result(WAIT)
    assert failed.value.reason == "caller_down"
    assert prompts(name) == ["first"]


# -- 14 -------------------------------------------------------------------------------
def test_14_drain_refuses_input_fails_the_queue_and_lets_the_turn_finish(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold, result("A")), result("never")])
    behave(name, handle_response=lambda ref, resp, s: Prompt("follow-up", s))
    ch = w.agents.channel()
    a = w.agents.tell_with_completion(name, "A", ch)
    w.blocked(hold)

    with ThreadPoolExecutor(2) as pool:
        asked = pool.submit(w.agents.ask, name, "queued ask", WAIT)
        wait_until(lambda: w.status(name).queued == 1)
        c = w.agents.tell_with_completion(name, "C", ch)
        w.agents.notify_ack(name, {"note": "dropped"})

        with pytest.raises(AgentError) as early:
            w.agents.drain(name, timeout=0.05)  # the caller gives up; the drain goes on
        assert early.value.reason == "timeout"
        st = w.status(name)
        assert (st.draining, st.state, st.queued) == (True, "processing", 0)
        with pytest.raises(TurnFailed) as queued_ask:
            asked.result(WAIT)
        assert w.completion(ch, c) == {"error": "draining", "info": {}}
        refusals = [lambda: w.agents.tell(name, "x"), lambda: w.agents.ask(name, "x"),
                    lambda: w.agents.notify_ack(name, {}),
                    lambda: w.agents.tell_with_completion(name, "x", ch)]
        for refuse in refusals:
            with pytest.raises(AgentError) as refused:
                refuse()
            assert refused.value.reason == "draining"

        # the second drain waits for the exit (released once it is waiting: an agent
        # already gone is not_found)
        releaser = threading.Timer(0.5, w.release, [hold])
        releaser.start()
        w.agents.drain(name, WAIT)
        releaser.join()
        assert w.agents.whereis(name) is None  # drain returned only after the exit

    assert queued_ask.value.reason == "draining"
    assert outcome_of(w.messages(ch, is_completion(a))[-1]) == ("ok", "A")
    assert [e[0] for e in trace(name, "handle_response", "post_turn", "handle_event",
                                "terminate_agent")] == [
        "handle_response", "post_turn", "terminate_agent"]
    assert trace(name, "terminate_agent") == [("terminate_agent", "normal")]
    assert prompts(name) == ["A"]  # no follow-up, no queued request was dispatched


# -- 15 -------------------------------------------------------------------------------
def test_15_stop_answers_active_and_queued_asks_and_invents_no_tell_completion(
        w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold)])
    ch = w.agents.channel()

    with ThreadPoolExecutor(2) as pool:
        active = pool.submit(w.agents.ask, name, "active", ANSWER)
        w.blocked(hold)
        queued = pool.submit(w.agents.ask, name, "queued", ANSWER)
        wait_until(lambda: w.status(name).queued == 1)
        w.agents.tell_with_completion(name, "tell", ch)

        w.agents.stop(name)

        for fut in (active, queued):
            with pytest.raises(TurnFailed) as ended:
                fut.result(WAIT)
            assert (ended.value.reason, ended.value.info) == (
                "agent_terminated", {"reason": "shutdown"})
    assert w.agents.whereis(name) is None
    assert trace(name, "terminate_agent") == [("terminate_agent", "shutdown")]
    assert w.agents.receive(ch, 0.3) is None


def test_15_an_active_tell_gets_no_completion_on_stop(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold)])
    ch = w.agents.channel()
    w.agents.tell_with_completion(name, "active", ch)
    w.blocked(hold)

    w.agents.stop(name)
    w.release(hold)  # the abandoned stream ends; nothing of it is delivered

    wait_until(lambda: trace(name, "stream"), what="the abandoned stream to finish")
    assert w.agents.receive(ch, 0.3) is None
    assert trace(name, "handle_response", "handle_error", "post_turn") == []


def test_15_stop_from_the_agents_own_callback_is_self_stop(w: World) -> None:
    name = w.name()

    def stop_myself(event: Any, s: Any) -> NoReply:
        try:
            w.agents.stop(current_name())
        except AgentError as exc:
            return NoReply({**s, "stop": exc.reason})
        return NoReply(s)

    behave(name, handle_event=stop_myself)
    w.start(name, [result("still here")])

    w.agents.notify(name, {"stop": True})

    wait_until(lambda: w.status(name).agent_state.get("stop") == "self_stop")
    assert w.agents.ask(name, "alive?", timeout=WAIT).text == "still here"


# -- 20 -------------------------------------------------------------------------------
def test_20_malformed_contained_callbacks_are_logged_and_the_agent_keeps_running(
        w: World, caplog: pytest.LogCaptureFixture) -> None:
    name = w.name()

    def leaky_post_turn(outcome: Any, ref: str, s: Any) -> Any:
        raise RuntimeError(SECRET)

    behave(name, handle_event=lambda event, s: "not a decision",
           handle_error=lambda ref, err, s: 42, post_turn=leaky_post_turn)
    w.start(name, [result("one"), texts(end="boom"), result("three")])
    caplog.set_level(logging.WARNING, logger="hypha_celery.agents")

    assert w.agents.ask(name, "one", timeout=WAIT).text == "one"
    w.agents.notify_ack(name, {"note": "kept?"})
    wait_until(lambda: trace(name, "handle_event"))
    with pytest.raises(TurnFailed) as failed:
        w.agents.ask(name, "two", timeout=WAIT)
    assert w.agents.ask(name, "three", timeout=WAIT).text == "three"

    assert failed.value.reason == "boom"
    assert w.agents.whereis(name) is not None
    logged = caplog.text
    for callback in ("handle_event", "handle_error", "post_turn"):
        assert callback in logged
    assert SECRET not in logged
    # A contained failure keeps the previous state: the note never landed.
    assert w.status(name).agent_state["notes"] == []


def test_20_a_malformed_handle_response_stops_the_agent_with_a_bounded_reason(
        w: World) -> None:
    name = w.name()
    behave(name, handle_response=lambda ref, resp, s: None)
    w.start(name, [result(SECRET)])

    with pytest.raises(TurnFailed) as ended:
        w.agents.ask(name, "go", timeout=ANSWER)

    assert ended.value.reason == "agent_terminated"
    assert SECRET not in json.dumps(ended.value.info) and SECRET not in str(ended.value)
    assert w.agents.whereis(name) is None
    wait_until(lambda: trace(name, "terminate_agent"))
    assert trace(name, "terminate_agent") == [("terminate_agent", "callback_failed")]


def test_20_status_and_snapshot_dumps_hold_no_prompt_or_secret(w: World) -> None:
    name, hold = w.name(), w.tag()
    w.start(name, [w.gate(hold)], state={"key": SECRET})
    w.agents.tell(name, f"PROMPT-SENTINEL {SECRET}")
    w.blocked(hold)

    dumps = [repr(w.status(name)), json.dumps(w.agents.runtime_snapshot(name)),
             repr(w.agents.whereis(name))]

    for dump in dumps:
        assert SECRET not in dump and "PROMPT-SENTINEL" not in dump
