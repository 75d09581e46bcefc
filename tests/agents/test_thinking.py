"""A turn whose stream reported thinking writes ``thinking.started`` /
``thinking.completed`` into the agent's log (its character count, never the text),
before ``agent.turn.completed``; a turn without thinking writes none (issue 26)."""

from __future__ import annotations

import json
from typing import Any

from hypha_celery import Hypha
from hypha_celery.agents import Agent, NoReply, Response
from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.events import payloads as ev


class Quiet(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply(state)


def log_of(hypha: Hypha, name: str) -> list[Any]:
    info = hypha.agents.whereis(name)
    assert info is not None
    return list(hypha.store.events(info.incarnation))


def test_a_turns_thinking_is_written_as_counts(hypha: Hypha) -> None:
    hypha.agents.start(Quiet, name="thinker", backend=MockBackend, scripts=[
        [BackendEvent.new("reasoning", {"chars": 40}),
         BackendEvent.new("reasoning", {"chars": 2}),
         BackendEvent.new("result", {"text": "answer"})],
        [BackendEvent.new("result", {"text": "plain"})]])
    assert hypha.agents.ask("thinker", "first", timeout=10).text == "answer"
    assert hypha.agents.ask("thinker", "second", timeout=10).text == "plain"
    events = log_of(hypha, "thinker")
    kinds = [e.kind for e in events if e.kind.startswith(("agent.turn.", "thinking."))]
    assert kinds == ["agent.turn.started", "thinking.started", "thinking.completed",
                     "agent.turn.completed", "agent.turn.started", "agent.turn.completed"]
    (done,) = [e.body for e in events if e.kind == "thinking.completed"]
    assert done == ev.ThinkingCompleted(mode="summary", chars=42, tokens=None)
    assert "answer" not in json.dumps([e.data for e in events if e.kind.startswith("thinking")])
