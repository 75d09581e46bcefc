"""Pipeline: distinct one-turn stage agents, each feeding the next.

When to reach for this
    Work that flows through fixed steps with different instructions (or models, or
    tools) per step: draft, then edit, then translate.

The pattern
    Each ``Stage`` knows its ``instruction`` and its ``next_stage`` (``None`` for the
    last). ``handle_event({"pipeline_input": text})`` becomes ``Prompt(instruction: text)``;
    ``handle_response`` notifies the next stage with its output and halts: a stage runs
    one turn. A failure travels down as ``{"pipeline_failed": reason}``, so the last stage
    always ends, ``done`` or ``failed``. :func:`start_pipeline` starts the stages and, if
    one cannot start, stops the ones it started (only those: it owns nothing else).

Using it
    ``names = start_pipeline(hypha.agents, [(name, instruction, scripts), ...])``, then
    ``hypha.agents.notify(names[0], {"pipeline_input": text})``; wait until the last
    stage is halted and read its ``output`` (or ``error``).
"""

from __future__ import annotations

from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import (
    Agent,
    AgentDecision,
    Agents,
    Halt,
    NoReply,
    Prompt,
    Response,
    TurnError,
)
from hypha_celery.backends import MockBackend


class Stage(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {
            "instruction": opts["instruction"], "next_stage": opts["next_stage"],
            "phase": "waiting", "prompt": None, "output": None, "error": None}

    def handle_event(self, event: Any, state: Any) -> AgentDecision:
        if "pipeline_failed" in event:
            return self._end(state, error=event["pipeline_failed"])
        if "pipeline_input" in event:
            return Prompt(f"{state['instruction']}: {event['pipeline_input']}",
                          {**state, "phase": "working"})
        return NoReply(state)

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        return self._end({**state, "prompt": response.prompt}, output=response.text)

    def handle_error(self, ref: str, error: TurnError, state: Any) -> AgentDecision:
        return self._end(state, error=error.reason)

    @staticmethod
    def _end(state: Any, output: str | None = None, error: str | None = None) -> Halt:
        nxt = state["next_stage"]
        if nxt is not None:
            event = {"pipeline_input": output} if error is None else {"pipeline_failed": error}
            _app.agents().notify(nxt, event)
        return Halt({**state, "phase": "failed" if error else "done", "output": output,
                     "error": error})


def start_pipeline(agents: Agents, stages: list[tuple[str, str, list[Any]]]) -> list[str]:
    started: list[str] = []
    try:
        for i, (name, instruction, scripts) in enumerate(stages):
            nxt = stages[i + 1][0] if i + 1 < len(stages) else None
            agents.start(Stage, name=name, backend=MockBackend, scripts=scripts,
                         instruction=instruction, next_stage=nxt)
            started.append(name)
    except Exception:  # roll back what this call started, then re-raise
        for name in started:
            agents.stop(name)
        raise
    return started


def run(hypha: Hypha, edit_script: list[Any] | None = None) -> dict[str, Any]:
    """Draft -> edit -> translate; ``edit_script`` replaces the editor's one script."""
    _app.use(hypha)
    names = start_pipeline(hypha.agents, [
        ("draft", "Draft", [_app.result("cats are nice")]),
        ("edit", "Edit", [edit_script or _app.result("Cats are lovely.")]),
        ("translate", "Translate", [_app.result("Les chats sont adorables.")]),
    ])
    hypha.agents.notify(names[0], {"pipeline_input": "a line about cats"})
    # every stage, not only the last: a stage notifies the next one from its callback,
    # before its own halted state is stored
    _app.wait_for(lambda: all(_app.halted(name) for name in names))
    return {name: _app.state(name) for name in names}


def main() -> None:
    with _app.demo() as hypha:
        for name, st in run(hypha).items():
            print(f"{name}: {st['prompt']!r} -> {st['output']!r}")


if __name__ == "__main__":
    main()
