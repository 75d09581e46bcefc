"""Debate: two agents argue by notifying each other, with no orchestrator.

When to reach for this
    Two (or a few) peers that react to each other's output: critic and author,
    proposer and opponent. Nobody in the middle decides whose turn it is.

The pattern
    Each ``Debater`` knows its ``peer``. ``handle_response`` sends its answer to the peer
    with ``notify`` (cross-agent, from a worker thread, through the app of
    :mod:`examples.agents._app`); the peer's ``handle_event`` turns it into
    ``Prompt(rebuttal)``. The round number travels with the message. The agent that
    speaks the last round (``max_rounds``) notifies ``{"debate": "done"}`` and halts; the
    peer halts on ``done``. Both stop at the cap, and neither sleeps or polls.

Using it
    Start both debaters (each names the other), then ``tell`` the opener the motion;
    wait until both are halted and read their ``transcript``.
"""

from __future__ import annotations

from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import Agent, AgentDecision, Halt, NoReply, Prompt, Response, current_name
from hypha_celery.backends import MockBackend


class Debater(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"peer": opts["peer"], "round": 0,
                                              "max_rounds": opts["max_rounds"],
                                              "transcript": []}

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        rnd = state["round"] + 1
        state = {**state, "round": rnd,
                 "transcript": [*state["transcript"], [current_name(), response.text]]}
        last = rnd >= state["max_rounds"]
        _app.agents().notify(state["peer"], {"debate": "done" if last else "say",
                                             "round": rnd, "text": response.text})
        return Halt(state) if last else NoReply(state)

    def handle_event(self, event: Any, state: Any) -> AgentDecision:
        state = {**state, "round": event["round"],
                 "transcript": [*state["transcript"], [state["peer"], event["text"]]]}
        if event["debate"] == "done":
            return Halt(state)
        return Prompt(f"Rebut: {event['text']}", state)


def run(hypha: Hypha, max_rounds: int = 4) -> dict[str, Any]:
    _app.use(hypha)
    for me, peer in (("pro", "con"), ("con", "pro")):
        turns = (max_rounds + (me == "pro")) // 2  # pro opens, so it speaks the odd rounds
        scripts = [_app.result(f"{me} argument {i + 1}") for i in range(turns)]
        hypha.agents.start(Debater, name=me, backend=MockBackend, scripts=scripts,
                           peer=peer, max_rounds=max_rounds)
    hypha.agents.tell("pro", "Motion: tabs beat spaces")
    _app.wait_for(lambda: _app.halted("pro") and _app.halted("con"))
    return {name: _app.state(name) for name in ("pro", "con")}


def main() -> None:
    with _app.demo() as hypha:
        print(run(hypha))


if __name__ == "__main__":
    main()
