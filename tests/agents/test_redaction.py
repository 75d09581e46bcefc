"""Secret sentinels: prompts and secrets never reach content-free telemetry, logs, status
dumps, snapshots or the agent's event stream (GenAgent scenario 20)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from hypha_celery import Hypha
from hypha_celery.agents import Agent, Halt, NoReply, Prompt, Response, TurnError, attach, detach
from hypha_celery.agents.telemetry import CONTENT_FREE
from hypha_celery.backends import BackendEvent, MockBackend, Session
from tests.runtime.support import wait_until

SECRET = "sk-test-SECRET-123"
PROMPT = "PROMPT-SENTINEL"


class SecretBackend(MockBackend):
    """A Mock whose session holds an API key, as a real provider's would."""

    def start_session(self, opts: dict[str, Any]) -> Session:
        session = super().start_session(opts)
        session["api_key"] = opts["api_key"]
        return session


class Leaky(Agent):
    """Holds the secret in its state and raises with it in the message."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"], "api_key": SECRET}, {"key": SECRET, "n": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({**state, "n": state["n"] + 1})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        raise RuntimeError(f"{SECRET} {PROMPT}")

    def handle_event(self, event: Any, state: Any) -> Prompt | Halt:
        raise ValueError(f"bad event {event} {SECRET}")

    def post_turn(self, outcome: Any, ref: str, state: Any) -> Any:
        raise KeyError(SECRET)


def test_no_sentinel_in_telemetry_logs_snapshots_or_events(
        hypha: Hypha, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[tuple[Any, ...]] = []

    def record(event: tuple[str, ...], measurements: dict[str, Any],
               metadata: dict[str, Any]) -> None:
        seen.append((event, measurements, metadata))

    for name in CONTENT_FREE:
        attach(name, record)
    try:
        hypha.agents.start(Leaky, name="leaky", backend=SecretBackend, scripts=[
            [BackendEvent.new("text", {"text": PROMPT}),
             BackendEvent.new("result", {"text": PROMPT})],
            MockBackend.raising("boom"),
            MockBackend.gate("hold", [BackendEvent.new("result", {"text": "held"})])])
        assert hypha.agents.ask("leaky", f"{PROMPT} {SECRET}", timeout=10).text == PROMPT
        ref = hypha.agents.tell("leaky", f"{PROMPT} two")
        wait_until(lambda: hypha.agents.poll("leaky", ref).status == "error")
        hypha.agents.notify("leaky", {"note": PROMPT})
        held = hypha.agents.tell("leaky", f"{PROMPT} three")
        assert MockBackend.wait_blocked("hold", 10) is not None
        snapshot = hypha.agents.runtime_snapshot("leaky")
        status = hypha.agents.status("leaky")
        MockBackend.release("hold")
        wait_until(lambda: hypha.agents.poll("leaky", held).status == "completed")
    finally:
        for name in CONTENT_FREE:
            detach(name, record)

    assert status.agent_state["key"] == SECRET  # the API gives the state to who asks ...
    dumps = [repr(status), str(status), repr(snapshot), str(seen), caplog.text,
             str([(e.kind, e.data) for e in hypha.store.events(snapshot_incarnation(hypha))])]
    for dump in dumps:  # ... and nothing else shows it
        assert SECRET not in dump and PROMPT not in dump
    assert {e[0] for e in seen} >= {("turn", "start"), ("turn", "stop"), ("turn", "error")}
    assert "RuntimeError" in caplog.text and "KeyError" in caplog.text  # logged, by type


def snapshot_incarnation(hypha: Hypha) -> str:
    info = hypha.agents.whereis("leaky")
    assert info is not None
    return info.incarnation
