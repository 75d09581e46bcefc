"""A contained callback that raises keeps the state from before the call, even when it
changed the state it was given in place (docs/agents.md: "a failing handle_error,
handle_event or post_turn keeps the previous state")."""

from __future__ import annotations

from typing import Any

from hypha_celery import Hypha
from hypha_celery.agents import Agent, NoReply, Response, TurnError
from hypha_celery.backends import BackendEvent, MockBackend
from tests.runtime.support import wait_until


class Mutating(Agent):
    """Every contained callback appends to ``state["log"]``, then raises."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts.get("scripts", [])}, {"log": [], "seen": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({**state, "seen": state["seen"] + 1})

    def handle_event(self, event: Any, state: Any) -> NoReply:
        state["log"].append(("event", event))
        if event == "fail":
            raise RuntimeError("handle_event failed")
        return NoReply(state)

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        state["log"].append("error")
        raise RuntimeError("handle_error failed")

    def post_turn(self, outcome: Response | TurnError, ref: str, state: Any) -> Any:
        state["log"].append("post_turn")
        raise RuntimeError("post_turn failed")


def test_a_raising_handle_event_keeps_the_state_from_before_the_call(hypha: Hypha) -> None:
    hypha.agents.start(Mutating, name="m", backend=MockBackend)
    hypha.agents.notify("m", "ok")
    wait_until(lambda: hypha.agents.status("m").agent_state["log"] == [["event", "ok"]])
    hypha.agents.notify("m", "fail")
    hypha.agents.notify("m", "after")
    wait_until(lambda: ["event", "after"] in hypha.agents.status("m").agent_state["log"])
    assert hypha.agents.status("m").agent_state["log"] == [["event", "ok"], ["event", "after"]]


def test_raising_handle_error_and_post_turn_keep_the_state_from_before(hypha: Hypha) -> None:
    hypha.agents.start(Mutating, name="m", backend=MockBackend,
                       scripts=[[BackendEvent.new("result", {"text": "hi"})],
                                MockBackend.error("boom")])
    hypha.agents.ask("m", "one")  # handle_response counts; post_turn appends and raises
    assert hypha.agents.status("m").agent_state == {"log": [], "seen": 1}
    ref = hypha.agents.tell("m", "two")  # handle_error appends and raises; so does post_turn
    wait_until(lambda: hypha.agents.poll("m", ref).status == "error")
    assert hypha.agents.status("m").agent_state == {"log": [], "seen": 1}
