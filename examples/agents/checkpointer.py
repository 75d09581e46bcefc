"""Checkpointer: a human reviews every step before the agent goes on.

When to reach for this
    Multi-step work where a person must approve, correct or stop each step: drafting a
    document section by section, a migration plan, anything you would not let run
    unattended.

The pattern
    After each step ``handle_response`` parks the agent *idle* with
    ``phase: "awaiting_review"``; it does not halt, because a halted agent keeps its
    prompt queue frozen until ``resume``, while an idle one handles the review at once.
    Review decisions arrive as events: ``{"review": "approve"}`` (keep the draft, go to
    the next step, halt after the last), ``{"review": "revise", "hint": ...}`` (redo the
    step with the hint) and ``{"review": "finish"}`` (keep the draft and stop now). A
    review that arrives when nothing awaits one is ignored.

Using it
    ``start(Drafter, name=..., backend=MockBackend, scripts=[...], steps=[...])``,
    ``tell(name, steps[0])``; each time ``agent_state["phase"] == "awaiting_review"`` show
    ``draft`` to the human and ``notify`` their decision.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import Agent, AgentDecision, Halt, NoReply, Prompt, Response
from hypha_celery.backends import MockBackend


class Drafter(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"steps": opts["steps"], "step": 0,
                                              "phase": "drafting", "draft": None,
                                              "approved": [], "turns": 0, "revisions": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        return NoReply({**state, "phase": "awaiting_review", "draft": response.text,
                        "turns": state["turns"] + 1})

    def handle_event(self, event: Any, state: Any) -> AgentDecision:
        decision = event.get("review")
        if state["phase"] != "awaiting_review":
            return NoReply(state)
        if decision == "revise":
            return Prompt(f"Revise {state['draft']!r}: {event['hint']}",
                          {**state, "phase": "drafting", "revisions": state["revisions"] + 1})
        if decision not in ("approve", "finish"):
            return NoReply(state)
        state = {**state, "approved": [*state["approved"], state["draft"]],
                 "step": state["step"] + 1, "draft": None}
        if decision == "finish" or state["step"] == len(state["steps"]):
            return Halt({**state, "phase": "done"})
        return Prompt(state["steps"][state["step"]], {**state, "phase": "drafting"})


def awaiting(name: str, turns: int) -> bool:
    st = _app.state(name)
    return bool(st["phase"] == "awaiting_review" and st["turns"] == turns)


def run(hypha: Hypha, name: str = "drafter") -> dict[str, Any]:
    _app.use(hypha)
    steps = ["Outline the post", "Write the intro", "Write the ending"]
    hypha.agents.start(Drafter, name=name, backend=MockBackend, steps=steps,
                       scripts=[_app.result("outline v1"), _app.result("outline v2"),
                                _app.result("intro v1")])
    hypha.agents.tell(name, steps[0])
    reviews = [{"review": "revise", "hint": "add a section on costs"},
               {"review": "approve"}, {"review": "finish"}]
    for turns, review in enumerate(reviews, start=1):
        _app.wait_for(partial(awaiting, name, turns))
        hypha.agents.notify(name, review)
    _app.wait_for(lambda: _app.halted(name))
    return dict(_app.state(name))


def main() -> None:
    with _app.demo() as hypha:
        print(run(hypha))


if __name__ == "__main__":
    main()
