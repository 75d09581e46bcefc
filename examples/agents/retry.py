"""Retry: back off and try a failed turn again, without the agent ever sleeping.

When to reach for this
    A backend that fails now and then (rate limits, overloaded servers) and a prompt
    worth repeating.

The pattern
    *Tokenized timer* (:class:`BackoffAgent`). ``pre_turn`` remembers the prompt and
    counts attempts. ``handle_error`` does not retry by itself: it picks a fresh token,
    asks for ``notify(name, {"retry": token})`` in ``base_delay_s * 2 ** (attempt - 1)``
    seconds (a Celery countdown, :func:`examples.agents._app.notify_later`: the wait
    lives in the broker, the agent stays idle and serves other input) and records the
    token. ``handle_event`` re-prompts only for the *current* token, so a cancelled
    retry (``{"cancel_retry": true}`` clears it) or a stale timer does nothing. The
    attempts are capped (``phase: "gave_up"``), and ``interrupted`` / ``timeout`` halt
    at once: somebody wanted the turn to stop.

    *Caller-owned* (:class:`CallerOwnedRetry`). ``handle_error`` returns
    ``Prompt(prompt, state)``: for an ``ask`` or a ``tell`` that is a retry of the same
    request, the same ref, ``attempt + 1``, run ahead of the queue, one final outcome
    for the caller (``ask`` just returns the answer). It has no delay: use it for
    failures worth retrying at once.

Using it
    ``start(BackoffAgent, ..., max_attempts=4, base_delay_s=0.5)``, ``tell`` it, and
    watch ``agent_state["phase"]`` (``done``, ``gave_up``, ``cancelled``, ``stopped``).
    ``start(CallerOwnedRetry, ..., max_attempts=3)`` and ``ask`` it.
"""

from __future__ import annotations

import uuid
from typing import Any

from examples.agents import _app
from hypha_celery import Hypha
from hypha_celery.agents import (
    Agent,
    AgentDecision,
    Halt,
    NoReply,
    Prompt,
    Response,
    TurnError,
    attach,
    current_name,
    detach,
)
from hypha_celery.backends import MockBackend

STOP_REASONS = ("interrupted", "timeout")


class _CountsAttempts(Agent):
    def pre_turn(self, prompt: str, state: Any) -> AgentDecision:
        """Remember the prompt and count the attempt."""
        return Prompt(prompt, {**state, "prompt": prompt, "attempts": state["attempts"] + 1})


class BackoffAgent(_CountsAttempts):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {
            "max_attempts": opts.get("max_attempts", 4),
            "base_delay_s": opts.get("base_delay_s", 0.5), "attempts": 0, "prompt": None,
            "token": None, "phase": "idle", "errors": [], "delays": [], "answer": None}

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        return NoReply({**state, "phase": "done", "token": None, "answer": response.text})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> AgentDecision:
        state = {**state, "errors": [*state["errors"], error.reason], "token": None}
        if error.reason in STOP_REASONS:
            return Halt({**state, "phase": "stopped"})
        if state["attempts"] >= state["max_attempts"]:
            return NoReply({**state, "phase": "gave_up"})
        token = uuid.uuid4().hex
        delay = state["base_delay_s"] * 2 ** (state["attempts"] - 1)
        _app.notify_later(str(current_name()), {"retry": token}, delay)
        return NoReply({**state, "phase": "backing_off", "token": token,
                        "delays": [*state["delays"], delay]})

    def handle_event(self, event: Any, state: Any) -> AgentDecision:
        if event.get("cancel_retry"):
            return NoReply({**state, "token": None, "phase": "cancelled"})
        if state["token"] is None or event.get("retry") != state["token"]:
            return NoReply(state)  # a stale or cancelled timer
        return Prompt(state["prompt"], {**state, "token": None, "phase": "retrying"})


class CallerOwnedRetry(_CountsAttempts):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"]}, {"max_attempts": opts.get("max_attempts", 3),
                                              "attempts": 0, "prompt": None, "errors": []}

    def handle_response(self, ref: str, response: Response, state: Any) -> AgentDecision:
        return NoReply({**state, "attempts": 0})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> AgentDecision:
        state = {**state, "errors": [*state["errors"], error.reason]}
        if error.reason in STOP_REASONS or state["attempts"] >= state["max_attempts"]:
            return NoReply({**state, "attempts": 0})
        return Prompt(state["prompt"], state)


def flaky(failures: int, text: str) -> list[Any]:
    """Scripts for ``failures`` rate-limited attempts, then one answer."""
    return [MockBackend.error("rate_limited")] * failures + [_app.result(text)]


def run(hypha: Hypha) -> dict[str, Any]:
    _app.use(hypha)
    hypha.agents.start(BackoffAgent, name="backoff", backend=MockBackend,
                       scripts=flaky(2, "made it"), base_delay_s=0.05)
    hypha.agents.tell("backoff", "fetch the report")
    _app.wait_for(lambda: _app.state("backoff")["phase"] == "done")

    starts: list[tuple[str, int]] = []

    def on_start(event: Any, measurements: dict[str, Any], meta: dict[str, Any]) -> None:
        if meta["agent"] == "owned":
            starts.append((meta["ref"], meta["attempt"]))

    attach(("turn", "start"), on_start)
    try:
        hypha.agents.start(CallerOwnedRetry, name="owned", backend=MockBackend,
                           scripts=flaky(2, "made it too"))
        answer = hypha.agents.ask("owned", "fetch the report", timeout=15).text
    finally:
        detach(("turn", "start"), on_start)
    return {"backoff": _app.state("backoff"), "owned": {"answer": answer, "starts": starts}}


def main() -> None:
    with _app.demo() as hypha:
        print(run(hypha))


if __name__ == "__main__":
    main()
