"""Heartbeat: a watcher driven by a clock (Celery beat).

When to reach for this
    Work that should happen on a rhythm, but only when there is enough to do: summarize
    the observations of the last minutes once at least ``min_batch`` of them piled up.

The pattern
    Observations arrive with ``notify({"observation": ...})`` and pile up in state. A
    Celery beat entry (:func:`beat_entry`) sends the small ``tick`` task every
    ``every`` seconds; it does ``hypha.agents.notify(name, {"tick": now})``. On a tick the
    agent decides from *its own state*: fewer than ``min_batch`` observations, or a batch
    already in flight, is a ``NoReply``; otherwise the batch moves to ``in_flight`` and
    becomes a prompt. A failed turn puts the batch back, so nothing is lost. The clock
    is not the agent's business: it never sleeps, and a tick for an agent that is gone
    is a no-op (``notify`` of an unknown name does nothing), so a stale beat entry is
    harmless.

Using it
    ``register_tick(hypha)`` (before the worker starts), then in your app module
    ``hypha.celery.conf.beat_schedule.update(beat_entry("sensor", every=30.0))`` and run
    one ``celery -A yourapp:celery beat``. Tests call :func:`tick` (or the task) directly.
"""

from __future__ import annotations

import time
from typing import Any

from celery import Task

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import Agent, AgentDecision, Agents, NoReply, Prompt, Response, TurnError
from hypha_celery.backends import MockBackend

TICK_TASK = "examples.agents.heartbeat.tick"


def tick(agents: Agents, name: str) -> None:
    """The task's body: one tick to ``name``."""
    agents.notify(name, {"tick": time.time()})


def register_tick(hypha: Hypha) -> Task:
    """The ``tick`` Celery task on ``hypha``'s app (idempotent)."""
    if TICK_TASK not in hypha.celery.tasks:

        @hypha.celery.task(name=TICK_TASK, shared=False, ignore_result=True)
        def tick_task(name: str) -> None:
            tick(hypha.agents, name)

    return hypha.celery.tasks[TICK_TASK]


def beat_entry(name: str, every: float = 60.0) -> dict[str, Any]:
    """A ``beat_schedule`` entry ticking agent ``name`` every ``every`` seconds (a tick
    that waited longer than one period is dropped: the next one is as good)."""
    return {f"heartbeat-{name}": {"task": TICK_TASK, "schedule": every, "args": [name],
                                  "options": {"expires": every}}}


class Observer(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"min_batch": opts.get("min_batch", 3),
                                              "pending": [], "in_flight": None,
                                              "ticks": 0, "summaries": []}

    def handle_event(self, event: Any, state: Any) -> AgentDecision:
        if "observation" in event:
            return NoReply({**state, "pending": [*state["pending"], event["observation"]]})
        state = {**state, "ticks": state["ticks"] + 1}
        batch = state["pending"]
        if state["in_flight"] is not None or len(batch) < state["min_batch"]:
            return NoReply(state)
        return Prompt("Summarize: " + ", ".join(map(str, batch)),
                      {**state, "pending": [], "in_flight": batch})

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        return NoReply({**state, "in_flight": None,
                        "summaries": [*state["summaries"], response.text]})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> AgentDecision:
        batch = state["in_flight"] or []
        return NoReply({**state, "in_flight": None, "pending": batch + state["pending"]})


def run(hypha: Hypha, name: str = "sensor") -> dict[str, Any]:
    _app.use(hypha)
    task = register_tick(hypha)
    hypha.agents.start(Observer, name=name, backend=MockBackend, min_batch=3,
                       scripts=[_app.result("3 readings, all nominal")])
    for reading in (20.5, 20.7):
        hypha.agents.notify(name, {"observation": reading})
    task.delay(name)  # what beat sends; too few observations: no turn
    _app.wait_for(lambda: _app.state(name)["ticks"] == 1)
    hypha.agents.notify(name, {"observation": 20.6})
    task.delay(name)  # now a batch: one turn
    _app.wait_for(lambda: _app.state(name)["summaries"])
    return dict(_app.state(name))


def main() -> None:
    with _app.demo() as hypha:
        print(run(hypha))
        print(beat_entry("sensor", every=30.0))


if __name__ == "__main__":
    main()
