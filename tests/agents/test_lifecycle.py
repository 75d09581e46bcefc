"""Start, options, the tell-result cache bound, stop and lookup."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Hypha
from hypha_celery.agents import (
    Agent,
    AgentAlreadyStarted,
    AgentError,
    AgentNotFound,
    AgentSpecError,
    AgentStartFailed,
    NoReply,
    Response,
    current_name,
)
from hypha_celery.backends import BackendEvent, MockBackend
from tests.runtime.support import embedded, wait_until


def result(text: str) -> list[BackendEvent]:
    return [BackendEvent.new("result", {"text": text})]


class Plain(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        if opts.get("refuse"):
            raise RuntimeError("refused")
        return {"scripts": opts.get("scripts", []),
                "start_error": opts.get("start_error")}, {"name": current_name()}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply(state)


class SelfStopper(Plain):
    def handle_event(self, event: Any, state: Any) -> NoReply:
        try:
            HOLDER["hypha"].agents.stop(current_name())
        except AgentError as exc:
            return NoReply({**state, "stop": exc.reason})
        return NoReply(state)


HOLDER: dict[str, Hypha] = {}


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    h = embedded(sqlite_url)
    HOLDER["hypha"] = h
    try:
        yield h
    finally:
        HOLDER.clear()
        h.close()


def test_start_errors_are_typed_and_keep_nothing(hypha: Hypha) -> None:
    with pytest.raises(AgentStartFailed) as init:
        hypha.agents.start(Plain, name="a", backend=MockBackend, refuse=True)
    assert init.value.reason == "init_agent_failed"
    with pytest.raises(AgentStartFailed) as backend:
        hypha.agents.start(Plain, name="a", backend=MockBackend, start_error="no_key")
    assert backend.value.reason == "backend_start_failed"
    for bad in ({"max_pending_prompts": -1}, {"watchdog_ms": 0},
                {"event_retention": "some"}, {"max_tell_results": "many"}):
        with pytest.raises(AgentSpecError):
            hypha.agents.start(Plain, name="a", backend=MockBackend, **bad)
    with pytest.raises(AgentSpecError):
        hypha.agents.start(object, name="a", backend=MockBackend)  # type: ignore[arg-type]
    with pytest.raises(AgentSpecError):
        hypha.agents.start(Plain, name="", backend=MockBackend)
    assert hypha.agents.list() == []
    info = hypha.agents.start(Plain, name="a", backend=MockBackend)
    assert hypha.agents.status("a").agent_state == {"name": "a"}  # current_name in init
    with pytest.raises(AgentAlreadyStarted):
        hypha.agents.start(Plain, name="a", backend=MockBackend)
    assert hypha.agents.whereis("a") == info
    assert hypha.agents.whereis("b") is None


def test_calls_on_an_unknown_name(hypha: Hypha) -> None:
    for call in (lambda: hypha.agents.tell("nobody", "x"), lambda: hypha.agents.status("nobody"),
                 lambda: hypha.agents.poll("nobody", "ref"), lambda: hypha.agents.stop("nobody"),
                 lambda: hypha.agents.notify_ack("nobody", {})):
        with pytest.raises(AgentNotFound):
            call()
    hypha.agents.notify("nobody", {})  # casts are no-ops
    hypha.agents.halt("nobody")
    hypha.agents.resume("nobody")
    hypha.agents.interrupt("nobody")


def test_tell_results_are_bounded_by_count_and_bytes(hypha: Hypha) -> None:
    hypha.agents.start(Plain, name="c", backend=MockBackend, max_tell_results=2,
                       scripts=[result(str(i)) for i in range(3)])
    refs = [hypha.agents.tell("c", f"t{i}") for i in range(3)]
    wait_until(lambda: hypha.agents.poll("c", refs[-1]).status == "completed")
    polls = [hypha.agents.poll("c", r) for r in refs]
    assert [(p.status, p.reason) for p in polls] == [
        ("error", "not_found"), ("completed", None), ("completed", None)]
    assert [p.response.text for p in polls[1:] if p.response] == ["1", "2"]

    hypha.agents.start(Plain, name="z", backend=MockBackend, max_tell_results=0,
                       scripts=[result("gone")])
    ref = hypha.agents.tell("z", "t")
    wait_until(lambda: hypha.agents.status("z").state == "idle"
               and hypha.agents.runtime_snapshot("z")["current_request"] is None)
    wait_until(lambda: hypha.agents.poll("z", ref).reason == "not_found")

    hypha.agents.start(Plain, name="b", backend=MockBackend, max_tell_result_bytes=2_500,
                       scripts=[result("x" * 300), result("y" * 300)])
    first, second = hypha.agents.tell("b", "1"), hypha.agents.tell("b", "2")
    wait_until(lambda: hypha.agents.poll("b", second).status == "completed")
    assert hypha.agents.poll("b", first).reason == "not_found"  # ~1.5 KB each: evicted


def test_stop_from_own_callback_is_refused_and_stop_frees_the_name(hypha: Hypha) -> None:
    hypha.agents.start(SelfStopper, name="s", backend=MockBackend)
    hypha.agents.notify("s", {"stop": True})
    wait_until(lambda: hypha.agents.status("s").agent_state.get("stop") == "self_stop")
    old = hypha.agents.whereis("s")
    hypha.agents.stop("s")
    assert hypha.agents.list() == []
    new = hypha.agents.start(Plain, name="s", backend=MockBackend)
    assert old is not None and new.incarnation != old.incarnation
