"""Supervisor: a coordinator spawns workers, fans a task out to them and fans the
results back in.

When to reach for this
    The number of sub-tasks is known only once the model has looked at the task, and
    each sub-task deserves its own conversation (its own context, its own backend).

The pattern
    The coordinator's first turn lists sub-tasks. Its ``handle_response`` starts one
    ``Worker`` per line with ``hypha.agents.start`` (callbacks run in a worker thread, so
    the facade comes from :func:`examples.agents._app.agents`) and notifies each
    ``{"task": ...}``. Each worker runs one turn, notifies the coordinator
    ``{"result": ..., "worker": name}`` and halts. The coordinator's ``handle_event``
    collects results; with the last one it self-chains a synthesis turn, then halts.
    A worker that fails reports ``{"failed": reason}`` instead, so the fan-in always
    completes. Worker scripts travel in the coordinator's state: it is JSON.

Using it
    ``start(Coordinator, name="lead", backend=MockBackend, scripts=[plan, synthesis],
    worker_scripts=[[...], [...]])``, ``tell("lead", task)``; wait until it is halted
    and read ``summary`` and ``results``.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import (
    Agent,
    AgentAlreadyStarted,
    AgentDecision,
    Halt,
    NoReply,
    Prompt,
    Response,
    TurnError,
    current_name,
)
from hypha_celery.backends import MockBackend


class Coordinator(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"phase": "planning", "workers": [],
                                              "results": {}, "summary": None,
                                              "worker_scripts": opts["worker_scripts"]}

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        if state["phase"] != "planning":
            return Halt({**state, "phase": "done", "summary": response.text})
        me, agents = current_name(), _app.agents()
        tasks = [line.strip() for line in response.text.splitlines() if line.strip()]
        workers = []
        for i, task in enumerate(tasks):
            name = f"{me}-worker-{i}"
            with suppress(AgentAlreadyStarted):  # a re-run of this callback
                agents.start(Worker, name=name, backend=MockBackend,
                             scripts=[state["worker_scripts"][i]], coordinator=me)
            agents.notify(name, {"task": task})
            workers.append(name)
        return NoReply({**state, "phase": "waiting", "workers": workers})

    def handle_event(self, event: Any, state: Any) -> AgentDecision:
        got = event.get("result", f"failed: {event.get('failed')}")
        results = {**state["results"], event["worker"]: got}
        state = {**state, "results": results}
        if len(results) < len(state["workers"]):
            return NoReply(state)
        joined = "; ".join(results[w] for w in state["workers"])
        return Prompt(f"Synthesize: {joined}", {**state, "phase": "synthesizing"})


class Worker(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"coordinator": opts["coordinator"]}

    def handle_event(self, event: Any, state: Any) -> AgentDecision:
        return Prompt(event["task"], state)

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        return self._report(state, {"result": response.text})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> AgentDecision:
        return self._report(state, {"failed": error.reason})

    @staticmethod
    def _report(state: Any, event: dict[str, Any]) -> Halt:
        _app.agents().notify(state["coordinator"], {**event, "worker": current_name()})
        return Halt(state)


def run(hypha: Hypha, name: str = "lead") -> dict[str, Any]:
    _app.use(hypha)
    hypha.agents.start(
        Coordinator, name=name, backend=MockBackend,
        scripts=[_app.result("price check\nstock check\nreview check"),
                 _app.result("All three checks passed.")],
        worker_scripts=[_app.result("price ok"), _app.result("stock ok"),
                        _app.result("reviews ok")])
    hypha.agents.tell(name, "Vet product 42")
    _app.wait_for(lambda: _app.halted(name))
    return dict(_app.state(name))


def main() -> None:
    with _app.demo() as hypha:
        print(run(hypha))


if __name__ == "__main__":
    main()
