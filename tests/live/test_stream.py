"""``run.stream()`` and ``agents.stream()``: a watcher gets what a running node or turn
emits from now on, ending with the end item; nothing of it is stored."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hypha_celery import Context, Finish, Graph, Hypha, Next, Settings
from hypha_celery.agents import Agent, NoReply, Response
from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.errors import AgentNotFound, RunNotFound
from hypha_celery.live import MemoryLiveBus, RedisLiveBus, agent_topic, run_topic
from tests.runtime.support import WAIT, embedded, wait_until

TOKENS: list[dict[str, Any]] = [{"kind": "text", "text": "Hel"}, {"kind": "text", "text": "lo"},
          {"kind": "tool_use", "id": "call_1", "name": "kb_search"},
          {"kind": "usage", "input": 12, "output": 2}]


def once(node: str) -> Any:
    def policy(ctx: Context) -> Next | Finish:
        return Next(node) if ctx.step == 0 else Finish(ctx.state)
    return policy


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    h = embedded(sqlite_url)
    try:
        yield h
    finally:
        h.close()


def gated_graph(hypha: Hypha, gate: threading.Event, entered: threading.Event) -> None:
    def speak(state: dict[str, Any], inp: Any) -> dict[str, Any]:
        entered.set()
        assert gate.wait(WAIT)
        return {"said": True}

    hypha.register(Graph("speaks", {"speak": speak}, once("speak")))


def test_a_run_streams_what_its_node_emits_then_its_end(hypha: Hypha) -> None:
    assert isinstance(hypha.live, MemoryLiveBus)  # embedded: in-process
    gate, entered = threading.Event(), threading.Event()
    gated_graph(hypha, gate, entered)
    run = hypha.start("speaks")
    assert entered.wait(WAIT)
    stream = run.stream(timeout=WAIT)  # subscribed when it returns
    for item in TOKENS:
        hypha.live.publish(run_topic(run.id), item)
    gate.set()
    assert list(stream) == [*TOKENS, {"kind": "end", "status": "completed", "reason": None}]
    stored = "".join(e.model_dump_json() for e in run.events())
    assert "Hel" not in stored and "kb_search" not in stored and "tool_use" not in stored
    # an ended run: its end only (tokens are never replayed)
    assert list(run.stream(timeout=WAIT)) == [
        {"kind": "end", "status": "completed", "reason": None}]


def test_stream_of_an_unknown_run_raises(hypha: Hypha) -> None:
    with pytest.raises(RunNotFound):
        hypha.get_run("nope")
    from hypha_celery.client.run import RunHandle

    with pytest.raises(RunNotFound):
        RunHandle(hypha, "nope").stream()
    assert not hypha.live._topics  # type: ignore[attr-defined]  # the subscription was closed


def test_on_redis_a_cancelled_run_ends_its_stream(redis_url: str, tmp_path: Path) -> None:
    """No worker: the run stays running until the client cancels it; the end item comes
    from the cancelling process through Redis."""
    hypha = Hypha(Settings(broker_url=redis_url, result_backend=redis_url,
                           store_url=f"sqlite:///{tmp_path / 'r.db'}", embedded=False))
    try:
        assert isinstance(hypha.live, RedisLiveBus)
        hypha.register(Graph("idle", {"n": lambda s, i: {}}, once("n")))
        run = hypha.start("idle")
        assert list(run.stream(timeout=0.2)) == []  # quiet and running: the timeout ends it
        stream = run.stream(timeout=WAIT)
        for item in TOKENS:
            hypha.live.publish(run_topic(run.id), item)
        got = [next(stream) for _ in TOKENS]
        assert run.cancel()
        assert [*got, *stream] == [*TOKENS, {"kind": "end", "status": "cancelled",
                                             "reason": "cancelled"}]
    finally:
        hypha.close()


class Quiet(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts.get("scripts", [])}, {}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply(state)


def test_an_agent_streams_its_turn_until_the_turn_ends(hypha: Hypha) -> None:
    tag = f"live-{id(hypha)}"
    hypha.agents.start(Quiet, name="talker", backend=MockBackend,
                       scripts=[MockBackend.gate(tag, [BackendEvent.new("result",
                                                                       {"text": "ok"})])])
    with pytest.raises(AgentNotFound):
        hypha.agents.stream("nobody")
    stream = hypha.agents.stream("talker", timeout=WAIT)
    ref = hypha.agents.tell("talker", "hi")
    assert MockBackend.wait_blocked(tag, WAIT) is not None
    for item in [*TOKENS, {"kind": "end", "ref": ref}]:  # as the turn's relay publishes them
        hypha.live.publish(agent_topic("talker"), item)
    assert list(stream) == [*TOKENS, {"kind": "end", "ref": ref}]
    MockBackend.release(tag)
    wait_until(lambda: hypha.agents.status("talker").state == "idle")


def test_a_turn_relays_its_events_then_its_end(hypha: Hypha) -> None:
    tag = f"relay-{id(hypha)}"
    events = [BackendEvent.new("text", {"text": "Hel"}), BackendEvent.new("text", {"text": "lo"}),
              BackendEvent.new("tool_use", {"id": "c1", "name": "kb", "input": {"q": "secret"}}),
              BackendEvent.new("usage", {"input_tokens": 3, "output_tokens": 2}),
              BackendEvent.new("result", {"text": "Hello"})]
    hypha.agents.start(Quiet, name="relayer", backend=MockBackend,
                       scripts=[MockBackend.gate(tag, events)])
    with hypha.agents.stream("relayer", timeout=WAIT) as stream:
        ref = hypha.agents.tell("relayer", "hi")
        assert MockBackend.wait_blocked(tag, WAIT) is not None
        MockBackend.release(tag)
        got = list(stream)
    assert got == [{"kind": "text", "text": "Hel", "ref": ref},
                   {"kind": "text", "text": "lo", "ref": ref},
                   {"kind": "tool_use", "id": "c1", "name": "kb", "ref": ref},
                   {"kind": "usage", "input_tokens": 3, "output_tokens": 2, "ref": ref},
                   {"kind": "end", "ref": ref, "status": "completed", "reason": None}]


def test_closing_a_stream_that_never_started_drops_its_subscription(hypha: Hypha) -> None:
    gate, entered = threading.Event(), threading.Event()
    gated_graph(hypha, gate, entered)
    run = hypha.start("speaks")
    bus = hypha.live
    assert isinstance(bus, MemoryLiveBus)
    with run.stream(timeout=WAIT):
        assert run_topic(run.id) in bus._topics  # subscribed at once, before iterating
    assert run_topic(run.id) not in bus._topics
    stream = run.stream(timeout=WAIT)
    stream.close()
    assert run_topic(run.id) not in bus._topics
    gate.set()
    run.wait(WAIT)
