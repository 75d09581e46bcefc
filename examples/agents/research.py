"""Research: one agent works through phases by chaining its own turns.

When to reach for this
    A task with a fixed shape (plan, do each part, combine) that one conversation can
    carry, and no other agent needs to take part.

The pattern
    ``handle_response`` reads the phase from state and returns ``Prompt(next, state)``:
    a self-chain, a new turn under a new ref (origin ``self_chain``), which goes ahead of
    anything queued. ``listing`` parses sub-questions (an empty list fails the run),
    ``answering`` asks them one by one, ``synthesizing`` writes the report and halts.
    ``handle_error`` halts with ``phase: "failed"``.

Using it
    ``hypha.agents.start(Researcher, name=..., backend=MockBackend, scripts=[...])``, then
    ``tell(name, topic)``; wait until ``status(name).halted`` and read
    ``agent_state["report"]``.
"""

from __future__ import annotations

from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import Agent, AgentDecision, Halt, Prompt, Response, TurnError
from hypha_celery.backends import MockBackend


class Researcher(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"phase": "listing", "questions": [],
                                              "answers": [], "report": None}

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        phase = state["phase"]
        if phase == "listing":
            questions = [q.strip() for q in response.text.splitlines() if q.strip()]
            if not questions:
                return Halt({**state, "phase": "failed", "error": "no sub-questions"})
            return Prompt(questions[0], {**state, "phase": "answering",
                                         "questions": questions})
        if phase == "answering":
            answers = [*state["answers"], response.text]
            state = {**state, "answers": answers}
            if len(answers) < len(state["questions"]):
                return Prompt(state["questions"][len(answers)], state)
            return Prompt("Synthesize: " + " | ".join(answers),
                          {**state, "phase": "synthesizing"})
        return Halt({**state, "phase": "done", "report": response.text})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> AgentDecision:
        return Halt({**state, "phase": "failed", "error": error.reason})


SCRIPTS = [_app.result("Why is the sky blue?\nWhy are sunsets red?"),
           _app.result("Rayleigh scattering"), _app.result("Longer light paths"),
           _app.result("Short wavelengths scatter most.")]


def run(hypha: Hypha, name: str = "researcher",
        scripts: list[Any] | None = None) -> dict[str, Any]:
    _app.use(hypha)
    scripts = SCRIPTS if scripts is None else scripts
    hypha.agents.start(Researcher, name=name, backend=MockBackend, scripts=scripts)
    hypha.agents.tell(name, "Research: the colour of the sky")
    _app.wait_for(lambda: _app.halted(name))
    return dict(_app.state(name))


def main() -> None:
    with _app.demo() as hypha:
        print(run(hypha))


if __name__ == "__main__":
    main()
