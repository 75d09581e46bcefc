"""The mid-turn checkpoint: a provider session id a backend acknowledges while its stream
runs is in the agent's row before the turn ends; a bad one fails the turn with a typed
backend error (MockBackend's ``ack`` steps play the CLI backends' part)."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest

from hypha_celery import Hypha
from hypha_celery.agents import Agent, NoReply, Response, TurnError, TurnFailed
from hypha_celery.agents.options import Limits
from hypha_celery.agents.stream import Attempt
from hypha_celery.backends import BackendError, BackendEvent, MockBackend
from hypha_celery.store import agents as table
from tests.runtime.support import wait_until

SID = "0b9e3c1e-4a7f-4f6e-9f55-2f0c9c1d7a01"


class Keeper(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts["scripts"], "session_id": opts.get("sid")}, {"outcomes": []}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({"outcomes": [*state["outcomes"], ["ok", response.text]]})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        return NoReply({"outcomes": [*state["outcomes"], ["error", error.reason]]})


def _result(text: str) -> BackendEvent:
    return BackendEvent.new("result", {"text": text})


def _stored_sid(hypha: Hypha, name: str) -> Any:
    found = table.read(hypha.store, name)
    return None if found is None else found["session"]["session_id"]


def test_an_acknowledged_id_is_stored_before_the_turn_ends_and_the_next_turn_has_it(
        hypha: Hypha) -> None:
    tag = f"ack-{uuid.uuid4().hex}"
    hypha.agents.start(Keeper, name="k", backend=MockBackend, scripts=[
        MockBackend.gate(tag, [MockBackend.ack(SID), _result("one")], ack=SID),
        MockBackend.echo_session()])
    ref = hypha.agents.tell("k", "first")
    assert MockBackend.wait_blocked(tag, 10) is not None
    assert _stored_sid(hypha, "k") == SID  # mid-turn, before the turn's end
    assert hypha.agents.poll("k", ref).status == "pending"
    MockBackend.release(tag)  # the repeat of the same id is fine
    wait_until(lambda: hypha.agents.poll("k", ref).status == "completed")
    assert hypha.agents.ask("k", "second", timeout=10).text == SID


@pytest.mark.parametrize(("steps", "kind"), [
    ([MockBackend.ack("not a token!")], "invalid_session_id"),
    ([MockBackend.ack(""), _result("x")], "invalid_session_id"),
    ([MockBackend.ack(SID), MockBackend.ack("other-id"), _result("x")],
     "conflicting_session_id"),
])
def test_an_invalid_or_conflicting_id_fails_the_turn(hypha: Hypha, steps: list[Any],
                                                     kind: str) -> None:
    hypha.agents.start(Keeper, name="k", backend=MockBackend, scripts=[steps])
    with pytest.raises(TurnFailed) as failed:
        hypha.agents.ask("k", "go", timeout=10)
    assert failed.value.reason == kind
    assert failed.value.info["backend_error"]["kind"] == kind


def test_an_id_other_than_the_sessions_own_is_conflicting(hypha: Hypha) -> None:
    hypha.agents.start(Keeper, name="k", backend=MockBackend, sid="first-id",
                       scripts=[[MockBackend.ack(SID), _result("x")]])
    with pytest.raises(TurnFailed, match="conflicting_session_id"):
        hypha.agents.ask("k", "go", timeout=10)
    assert _stored_sid(hypha, "k") == "first-id"


class _Swallowing(MockBackend):
    """A backend that ignores what ``checkpoint`` raised and answers anyway."""

    def prompt(self, session: Any, prompt: str, checkpoint: Any = None) -> Any:
        def events() -> Any:
            with contextlib.suppress(BackendError):
                checkpoint("bad id")
            yield _result("fine")

        return events(), session


def test_a_refused_checkpoint_fails_the_turn_even_if_the_backend_swallows_it(
        hypha: Hypha) -> None:
    hypha.agents.start(Keeper, name="k", backend=_Swallowing, scripts=[])
    with pytest.raises(TurnFailed, match="invalid_session_id"):
        hypha.agents.ask("k", "go", timeout=10)


def test_a_checkpoint_after_the_turn_ended_is_stale() -> None:
    backend = MockBackend()
    session = backend.start_session({"scripts": []})
    persisted: list[Any] = []
    attempt = Attempt(Keeper(), backend, "k", session, "p", None, Limits(), lambda e: None,
                      persist=persisted.append)
    attempt.stop(TurnError("interrupted"))
    with pytest.raises(BackendError, match="stale_checkpoint"):
        attempt.checkpoint(SID)
    assert persisted == []


def test_a_turn_ended_by_the_watchdog_keeps_the_acknowledged_id(hypha: Hypha) -> None:
    tag = f"ack-{uuid.uuid4().hex}"
    hypha.agents.start(Keeper, name="k", backend=MockBackend, watchdog_ms=300, scripts=[
        MockBackend.gate(tag, [_result("never")], timeout=2, ack=SID),
        MockBackend.echo_session()])
    with pytest.raises(TurnFailed, match="timeout"):
        hypha.agents.ask("k", "first", timeout=10)
    assert _stored_sid(hypha, "k") == SID
    assert hypha.agents.ask("k", "second", timeout=10).text == SID
