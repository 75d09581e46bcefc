"""An interrupt, the watchdog and ``stop`` cancel the provider's request through
``backend.cancel()``: the HTTP stream is closed (the server sees the disconnect) and a CLI's
whole process group is killed (no orphan in the process table)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import psutil
import pytest

from hypha_celery import Hypha
from hypha_celery.agents import Agent, NoReply, Response, TurnError, TurnFailed
from hypha_celery.backends import Backend, BackendEvent, OpenAIBackend
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import wait_until


class Keeper(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts), {"outcomes": []}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({"outcomes": [*state["outcomes"], ["ok", response.text]]})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        return NoReply({"outcomes": [*state["outcomes"], ["error", error.reason]]})


class Blocking(Backend):
    """A stream that blocks until ``cancel`` (or 30 s); counts the cancels."""

    provider: ClassVar[str] = "blocking"
    cancels: ClassVar[list[str]] = []
    started: ClassVar[threading.Event] = threading.Event()

    def __init__(self) -> None:
        self._gone = threading.Event()

    def start_session(self, opts: dict[str, Any]) -> dict[str, Any]:
        return {}

    def prompt(self, session: dict[str, Any], prompt: str,
               checkpoint: Any = None) -> tuple[Iterator[BackendEvent], dict[str, Any]]:
        def events() -> Iterator[BackendEvent]:
            Blocking.started.set()
            self._gone.wait(30)
            yield BackendEvent.new("result", {"text": "late"})

        return events(), session

    def cancel(self) -> None:
        Blocking.cancels.append(threading.current_thread().name)
        self._gone.set()

    def terminate_session(self, session: dict[str, Any]) -> None:
        return None


class Sleeping(Backend):
    """A CLI-like backend: ``sh -c 'sleep 60 & sleep 60'`` in a process group of its own;
    ``cancel`` kills the group."""

    provider: ClassVar[str] = "sleeping"
    groups: ClassVar[list[int]] = []

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def start_session(self, opts: dict[str, Any]) -> dict[str, Any]:
        return {}

    def prompt(self, session: dict[str, Any], prompt: str,
               checkpoint: Any = None) -> tuple[Iterator[BackendEvent], dict[str, Any]]:
        proc = self._proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"],
                                             start_new_session=True)
        Sleeping.groups.append(proc.pid)

        def events() -> Iterator[BackendEvent]:
            proc.wait()
            yield BackendEvent.new("error", {"reason": "cli_exit"})

        return events(), session

    def cancel(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(5)

    def terminate_session(self, session: dict[str, Any]) -> None:
        return None


@pytest.fixture(autouse=True)
def _reset() -> None:
    Blocking.cancels.clear()
    Blocking.started.clear()
    Sleeping.groups.clear()


def _outcomes(hypha: Hypha, name: str) -> list[Any]:
    return list(hypha.agents.status(name).agent_state["outcomes"])


def test_an_interrupt_cancels_the_backend_from_the_watch(hypha: Hypha) -> None:
    hypha.agents.start(Keeper, name="b", backend=Blocking)
    ref = hypha.agents.tell("b", "go")
    assert Blocking.started.wait(10)
    began = time.monotonic()
    assert hypha.agents.interrupt_request("b", ref) == "accepted"
    wait_until(lambda: _outcomes(hypha, "b") == [["error", "interrupted"]])
    assert time.monotonic() - began < 2
    assert Blocking.cancels == ["hypha-agent-stop"]


def test_the_watchdog_cancels_the_backend(hypha: Hypha) -> None:
    hypha.agents.start(Keeper, name="b", backend=Blocking, watchdog_ms=300)
    with pytest.raises(TurnFailed, match="timeout"):
        hypha.agents.ask("b", "go", timeout=10)
    assert len(Blocking.cancels) == 1


def test_stop_cancels_the_backend(hypha: Hypha) -> None:
    hypha.agents.start(Keeper, name="b", backend=Blocking)
    hypha.agents.tell("b", "go")
    assert Blocking.started.wait(10)
    hypha.agents.stop("b")
    wait_until(lambda: Blocking.cancels, what="the backend to be cancelled")


def test_an_interrupt_closes_the_http_stream(hypha: Hypha,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeLLM(default=Reply.hang(30)) as fake:
        hypha.agents.start(Keeper, name="o", backend=OpenAIBackend, model="gpt-test",
                           base_url=fake.openai_url)
        ref = hypha.agents.tell("o", "go")
        wait_until(lambda: fake.open_streams == 1, what="the stream to open")
        began = time.monotonic()
        assert hypha.agents.interrupt_request("o", ref) == "accepted"
        assert fake.wait_closed(5), "the server still writes the stream"
        wait_until(lambda: _outcomes(hypha, "o") == [["error", "interrupted"]])
        assert time.monotonic() - began < 3


def test_a_cancel_kills_the_whole_process_group(hypha: Hypha) -> None:
    hypha.agents.start(Keeper, name="s", backend=Sleeping, watchdog_ms=500)
    with pytest.raises(TurnFailed, match="timeout"):
        hypha.agents.ask("s", "go", timeout=10)
    (group,) = Sleeping.groups

    def orphans() -> list[int]:
        found = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(proc.info["pid"]) == group and proc.status() != "zombie":
                    found.append(proc.info["pid"])
            except (ProcessLookupError, psutil.NoSuchProcess):
                continue
        return found

    wait_until(lambda: not orphans(), 5, "the process group to be gone")


class Recording(OpenAIBackend):
    """``OpenAIBackend`` noting the thread its prompts run on."""

    threads: ClassVar[list[str]] = []

    def prompt(self, session: dict[str, Any], prompt: str,
               checkpoint: Any = None) -> tuple[Iterator[BackendEvent], dict[str, Any]]:
        Recording.threads.append(threading.current_thread().name)
        return super().prompt(session, prompt, checkpoint)


def test_an_http_turn_streams_on_the_tasks_own_thread(
        hypha: Hypha, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hosted backend's cancel reaches a blocked call (``cancel_unblocks``): no thread of
    its own per turn; any other backend still gets one."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    Recording.threads.clear()
    with FakeLLM() as fake:
        hypha.agents.start(Keeper, name="r", backend=Recording, model="gpt-test",
                           base_url=fake.openai_url)
        hypha.agents.ask("r", "go", timeout=10)
    assert Recording.threads and not Recording.threads[0].startswith("hypha-agent-")
    hypha.agents.start(Keeper, name="b", backend=Blocking, watchdog_ms=300)
    with pytest.raises(TurnFailed, match="timeout"):
        hypha.agents.ask("b", "go", timeout=10)
    assert Recording.cancel_unblocks and not Blocking.cancel_unblocks


@pytest.mark.parametrize("how", ["watchdog", "interrupt"])
def test_a_turn_waiting_for_the_providers_response_ends_at_once(
        hypha: Hypha, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """The provider answers only after 5 s: the watchdog (300 ms) or an interrupt ends the
    turn long before, though it runs on the task's own thread."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeLLM(default=Reply.text("late", delay_s=5)) as fake:
        options = {"watchdog_ms": 300} if how == "watchdog" else {}
        hypha.agents.start(Keeper, name="w", backend=OpenAIBackend, model="gpt-test",
                           base_url=fake.openai_url, **options)
        began = time.monotonic()
        ref = hypha.agents.tell("w", "go")
        wait_until(lambda: fake.requests, what="the request to reach the provider")
        if how == "interrupt":
            assert hypha.agents.interrupt_request("w", ref) == "accepted"
        reason = "timeout" if how == "watchdog" else "interrupted"
        wait_until(lambda: _outcomes(hypha, "w") == [["error", reason]], 4)
        assert time.monotonic() - began < 3
