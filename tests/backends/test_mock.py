from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery.backends import (
    Backend,
    BackendError,
    BackendEvent,
    MockBackend,
    Response,
    TurnError,
    collect,
)
from hypha_celery.backends.gate import GATE_URL_ENV


@pytest.fixture(autouse=True)
def _in_process_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GATE_URL_ENV, raising=False)


def reply(t: str, **data: Any) -> list[BackendEvent]:
    return [BackendEvent.new("text", {"text": t}), BackendEvent.new("result", {"text": t, **data})]


def turn(mock: MockBackend, session: dict[str, Any], prompt: str) -> Response | TurnError:
    stream, session2 = mock.prompt(session, prompt)
    assert session2 is session
    return collect(prompt, stream)


def test_is_a_backend_and_the_session_is_json() -> None:
    mock = MockBackend()
    session = mock.start_session({"scripts": [reply("a"), MockBackend.error("e"),
                                              MockBackend.raising("r"),
                                              MockBackend.gate("g", reply("b"))],
                                  "session_id": "s0"})
    assert isinstance(mock, Backend)
    assert json.loads(json.dumps(session)) == session
    assert session["session_id"] == "s0" and MockBackend.remaining(session) == 4


def test_scripts_in_order_with_history_and_remaining() -> None:
    mock = MockBackend()
    session = mock.start_session({"scripts": [reply("one"), reply("two")]})
    first = turn(mock, session, "p1")
    assert isinstance(first, Response) and first.text == "one"
    assert MockBackend.history(session) == ["p1"] and MockBackend.remaining(session) == 1
    second = turn(mock, session, "p2")
    assert isinstance(second, Response) and second.text == "two"
    assert MockBackend.history(session) == ["p1", "p2"] and MockBackend.remaining(session) == 0


def test_callable_script_gets_the_prompt() -> None:
    mock = MockBackend()
    session = mock.start_session({"scripts": [lambda p: reply(p.upper())]})
    out = turn(mock, session, "echo")
    assert isinstance(out, Response) and out.text == "ECHO"
    assert json.loads(json.dumps(session)) == session
    mock.terminate_session(session)
    mock.terminate_session(session)  # idempotent


def test_callable_script_from_another_process_is_unavailable() -> None:
    mock = MockBackend()
    session = mock.start_session({"scripts": [lambda p: reply(p)]})
    mock.terminate_session(session)  # as if this were another process: nothing registered
    with pytest.raises(BackendError) as info:
        mock.prompt(session, "x")
    assert info.value.kind == "script_unavailable"


def test_error_script_and_no_script_are_recorded() -> None:
    mock = MockBackend()
    session = mock.start_session({"scripts": [MockBackend.error("rate_limited")]})
    with pytest.raises(BackendError) as info:
        mock.prompt(session, "a")
    assert (info.value.provider, info.value.kind) == ("mock", "rate_limited")
    with pytest.raises(BackendError) as info:
        mock.prompt(session, "b")
    assert info.value.kind == "no_script"
    assert MockBackend.history(session) == ["a", "b"] and MockBackend.remaining(session) == 0


def test_raising_script_raises_only_when_consumed() -> None:
    mock = MockBackend()
    session = mock.start_session({"scripts": [MockBackend.raising("kaboom"), reply("ok")]})
    stream, _ = mock.prompt(session, "a")  # no error yet
    with pytest.raises(BackendError) as info:
        next(stream)
    assert info.value.kind == "kaboom"
    second = turn(mock, session, "b")
    assert isinstance(second, Response) and second.text == "ok"
    assert MockBackend.history(session) == ["a", "b"]


def test_raising_script_is_a_crashed_turn() -> None:
    mock = MockBackend()
    session = mock.start_session({"scripts": [MockBackend.raising("kaboom")]})
    out = turn(mock, session, "a")
    assert isinstance(out, TurnError) and out.reason == "task_crashed"
    assert out.info["backend_error"]["kind"] == "kaboom"


@pytest.mark.parametrize(("start_error", "kind"), [
    ("cli_missing", "cli_missing"),
    (BackendError("mock", "authentication", False, 401), "authentication"),
    (("http_error", 503, "down"), "server_error")])
def test_start_error(start_error: Any, kind: str) -> None:
    with pytest.raises(BackendError) as info:
        MockBackend().start_session({"start_error": start_error, "scripts": [reply("x")]})
    assert info.value.kind == kind


def test_invalid_scripts_and_sessions() -> None:
    with pytest.raises(BackendError) as info:
        MockBackend().start_session({"scripts": [42]})
    assert info.value.kind == "invalid_script"
    with pytest.raises(BackendError) as info:
        MockBackend.history({"backend": "claude"})
    assert info.value.kind == "not_mock_backend"


def test_scripts_may_be_event_json() -> None:
    mock = MockBackend()
    script = [e.to_json() for e in reply("from json")]
    session = mock.start_session({"scripts": [script]})
    out = turn(mock, session, "p")
    assert isinstance(out, Response) and out.text == "from json"


def test_update_session_captures_the_session_id_and_reset_clears_it() -> None:
    mock = MockBackend()
    session = mock.start_session({"scripts": [reply("a", session_id="s-1")], "session_id": "s0"})
    out = turn(mock, session, "p")
    assert isinstance(out, Response) and out.session_id == "s-1"
    session = mock.update_session(session, out.terminal.data)
    assert session["session_id"] == "s-1"
    assert mock.update_session(session, {"text": "no id"})["session_id"] == "s-1"
    assert mock.reset_session(session)["session_id"] is None


class _Bare(MockBackend):
    checkpoint_session = Backend.checkpoint_session


def test_optional_contract_defaults() -> None:
    bare = _Bare()
    with pytest.raises(BackendError) as info:
        bare.checkpoint_session(bare.start_session({}), "id")
    assert info.value.kind == "unsupported_checkpoint"
    with pytest.raises(NotImplementedError):
        MockBackend().resume_session("id", {})


def test_mock_checkpoints_a_session_id_and_refuses_another() -> None:
    mock = MockBackend()
    session = mock.start_session({})
    assert mock.checkpoint_session(session, "s-1")["session_id"] == "s-1"
    assert mock.checkpoint_session(session, "s-1")["session_id"] == "s-1"  # a repeat
    with pytest.raises(BackendError) as info:
        mock.checkpoint_session(session, "s-2")
    assert info.value.kind == "conflicting_session_id"


def run_in_thread(stream: Iterator[BackendEvent]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(collect("p", stream)), daemon=True)
    thread.start()
    return thread, out


def test_gate_in_process() -> None:
    tag = f"g-{uuid.uuid4().hex}"
    mock = MockBackend()
    session = mock.start_session({"scripts": [MockBackend.gate(tag, reply("released"))]})
    stream, _ = mock.prompt(session, "p")
    thread, out = run_in_thread(stream)
    blocked = MockBackend.wait_blocked(tag, timeout=5)
    assert blocked is not None and blocked["tag"] == tag and blocked["thread"] == thread.name
    assert thread.is_alive() and out == []
    MockBackend.release(tag)
    thread.join(5)
    assert isinstance(out[0], Response) and out[0].text == "released"
    assert MockBackend.wait_blocked(tag, timeout=0) is None  # announced once


def test_gate_release_before_it_is_reached() -> None:
    tag = f"g-{uuid.uuid4().hex}"
    MockBackend.release(tag)
    out = collect("p", MockBackend().prompt(
        MockBackend().start_session({"scripts": [MockBackend.gate(tag, reply("x"))]}), "p")[0])
    assert isinstance(out, Response) and out.text == "x"


def test_gate_timeout_raises_from_the_stream() -> None:
    tag = f"g-{uuid.uuid4().hex}"
    mock = MockBackend()
    session = mock.start_session({"scripts": [MockBackend.gate(tag, reply("x"), timeout=0.05)]})
    out = turn(mock, session, "p")
    assert isinstance(out, TurnError) and out.reason == "task_crashed"
    assert out.info["backend_error"]["kind"] == "gate_timeout"
    assert MockBackend.wait_blocked(tag, timeout=0) is not None
