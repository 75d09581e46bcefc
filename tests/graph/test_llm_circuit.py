"""The circuit breaker of a node that calls several providers is kept per node AND
provider: one provider's failures open its own circuit and hold only the retries of
calls that failed on it, not those of another provider's failures. A real embedded run
against two local model servers (OpenAI failing, Anthropic failing once)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Finish, Graph, Hypha, Next, Node, NodeContext, RetryPolicy, Settings
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.errors import RunFailed
from hypha_celery.runtime.failures import RESET
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT, of_kind, wait_until

OPENAI, ANTHROPIC = "openai:gpt-test", "anthropic:claude-test"


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeLLM, FakeLLM]]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-circuit")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-local-circuit")
    with FakeLLM() as openai, FakeLLM() as anthropic:
        yield openai, anthropic


def ask(state: dict[str, Any], inp: dict[str, str], ctx: NodeContext) -> dict[str, Any]:
    return {"answer": ctx.llm(inp["model"], [{"role": "user", "content": "hi"}]).text}


def policy(ctx: Any) -> Any:
    return Next("ask", ctx.input) if ctx.step == 0 else Finish(ctx.state)


def graph(**node: Any) -> Graph:
    retry = RetryPolicy(max_attempts=3, backoff=0.05, max_backoff=0.2)
    return Graph("breakers", {"ask": Node(ask, models=[OPENAI, ANTHROPIC], retry=retry,
                                          **node)}, policy)


def test_one_providers_open_circuit_does_not_hold_anothers_retries(
        sqlite_url: str, servers: tuple[FakeLLM, FakeLLM]) -> None:
    openai, anthropic = servers
    openai.default = Reply.error(500)  # down
    anthropic.script(Reply.error(500), Reply.text("fine"))  # one blip
    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=sqlite_url, embedded=True),
              llm=LLMClient(base_urls={"openai": openai.openai_url,
                                       "anthropic": anthropic.url}))
    try:
        h.register(graph())
        down = h.start("breakers", {"model": OPENAI})
        with pytest.raises(RunFailed):  # three failures: retries exhausted, circuit open
            down.wait(WAIT)
        circuit = h.store.circuit("breakers.ask:openai")
        assert circuit is not None and circuit["open_until"] > time.time() + RESET - 5
        blip = h.start("breakers", {"model": ANTHROPIC})
        assert blip.wait(WAIT) == {"answer": "fine"}
        (retry,) = of_kind(blip, "node.execution.retrying")
        assert retry.data["delay"] < 1.0  # its own backoff, not OpenAI's open circuit
        assert h.store.circuit("breakers.ask:anthropic")["failures"] == 0  # type: ignore[index]
        assert h.store.circuit("breakers.ask") is None  # nothing counted per node alone
        held = h.start("breakers", {"model": OPENAI})  # OpenAI's own retry waits
        wait_until(lambda: of_kind(held, "node.execution.retrying"), what="a retry")
        (retry,) = of_kind(held, "node.execution.retrying")
        assert RESET - 5 < retry.data["delay"] <= RESET
        held.cancel()
    finally:
        h.close()


def test_an_explicit_dependency_stays_one_circuit_for_every_provider(
        sqlite_url: str, servers: tuple[FakeLLM, FakeLLM]) -> None:
    openai, anthropic = servers
    openai.default = Reply.error(500)
    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=sqlite_url, embedded=True),
              llm=LLMClient(base_urls={"openai": openai.openai_url,
                                       "anthropic": anthropic.url}))
    try:
        h.register(graph(dependency="gateway"))
        with pytest.raises(RunFailed):
            h.start("breakers", {"model": OPENAI}).wait(WAIT)
        assert h.store.circuit("gateway")["open_until"] > 0  # type: ignore[index]
    finally:
        h.close()


def test_the_keys_of_a_node() -> None:
    g = graph()
    assert g.dependency_for("ask") == "breakers.ask"
    assert g.dependency_for("ask", "anthropic") == "breakers.ask:anthropic"
    assert g.dependencies_of("ask") == ("breakers.ask", "breakers.ask:openai",
                                        "breakers.ask:anthropic")  # its declared models'
    failed = [{"family": "model", "provider": "openai", "output": {}},
              {"family": "model", "provider": "anthropic", "error": {"type": "BackendError"}}]
    assert g.failure_dependency("ask", failed) == "breakers.ask:anthropic"
    assert g.failure_dependency("ask", failed[:1]) == "breakers.ask"  # the node's own failure
    assert g.failure_dependency("ask", None) == "breakers.ask"
    assert g.dependencies_of("ask", failed) == ("breakers.ask", "breakers.ask:openai")
    explicit = graph(dependency="gateway")
    assert explicit.failure_dependency("ask", failed) == "gateway"
    assert explicit.dependencies_of("ask", failed) == explicit.dependencies_of("ask") == (
        "gateway",)
