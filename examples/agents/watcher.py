"""Watcher: idle until something worth a turn happens.

When to reach for this
    A stream of events (alerts, webhooks, file changes) of which only a few need the
    model. Everything else should cost a row update, not a turn.

The pattern
    Events arrive with ``notify``. ``handle_event`` filters: a boring one is counted and
    answered ``NoReply``; an interesting one becomes ``Prompt(...)``, a turn. Events that
    arrive while a turn runs are deferred, not lost, and are handled in arrival order
    against the state *after* that turn's decision and ``post_turn``; so the watcher
    never sees a half-updated state and needs no locking. Between events it costs
    nothing: no task, no thread, just its row.

Using it
    ``start(Watcher, name=..., backend=MockBackend, scripts=[...], levels=["error"])``,
    then ``notify(name, {"level": "error", "msg": "disk full"})``; read ``alerts`` and
    ``ignored`` from the state.
"""

from __future__ import annotations

from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import Agent, AgentDecision, NoReply, Prompt, Response
from hypha_celery.backends import MockBackend


class Watcher(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"levels": opts.get("levels", ["error"]),
                                              "seen": 0, "ignored": 0, "alerts": []}

    def handle_event(self, event: Any, state: Any) -> AgentDecision:
        state = {**state, "seen": state["seen"] + 1}
        if event.get("level") not in state["levels"]:
            return NoReply({**state, "ignored": state["ignored"] + 1})
        return Prompt(f"Investigate: {event['msg']}", state)

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        return NoReply({**state, "alerts": [*state["alerts"], response.text]})


EVENTS = [{"level": "info", "msg": "user logged in"},
          {"level": "error", "msg": "disk full"},
          {"level": "debug", "msg": "cache hit"},
          {"level": "error", "msg": "payment timeout"}]


def run(hypha: Hypha, name: str = "watcher", scripts: list[Any] | None = None,
        events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    _app.use(hypha)
    events = EVENTS if events is None else events
    scripts = scripts or [_app.result("free some space"), _app.result("retry the gateway")]
    hypha.agents.start(Watcher, name=name, backend=MockBackend, scripts=scripts)
    for event in events:
        hypha.agents.notify(name, event)
    wanted = sum(e["level"] == "error" for e in events)
    _app.wait_for(lambda: len(_app.state(name)["alerts"]) == wanted
                  and _app.state(name)["seen"] == len(events))
    return dict(_app.state(name))


def main() -> None:
    with _app.demo() as hypha:
        print(run(hypha))


if __name__ == "__main__":
    main()
