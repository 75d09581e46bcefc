"""The plugin's local model servers, ``hypha_openai_server`` and ``hypha_anthropic_server``:
the official SDKs and hypha's model calls (``ctx.llm``, the hosted agent backends) over
real HTTP to them, scripted replies, recorded requests, one server per test."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import textwrap
import time
from typing import Any

import anthropic
import openai
import pytest

from hypha_celery import Finish, Graph, Hypha, Next, Node, NodeContext
from hypha_celery.agents import Agent, NoReply
from hypha_celery.backends import AnthropicBackend, OpenAIBackend, Response
from hypha_celery.testing import AnthropicServer, OpenAIServer, Reply, wait_until

USER: Any = [{"role": "user", "content": "hi"}]


def test_the_openai_sdk_streams_and_calls_through_the_fixture(
        hypha_openai_server: OpenAIServer) -> None:
    server = hypha_openai_server
    assert isinstance(server, OpenAIServer) and server.requests == []
    assert server.base_url == f"{server.url}/v1" and server.url.startswith("http://127.0.0.1:")
    server.script(Reply.text("Hello from the fake", chunks=3, usage=(12, 4, 0, 0)),
                  Reply.tool_call("lookup", {"q": "x"}, call_id="call_7"))
    with openai.OpenAI(base_url=server.base_url, api_key=server.api_key,
                       max_retries=0) as client:
        with client.responses.stream(model="gpt-test", input="hi") as stream:
            final = stream.get_final_response()
        assert final.output_text == "Hello from the fake"
        assert final.usage is not None and final.usage.input_tokens == 12
        call = client.responses.create(model="gpt-test", input="again").output[0]
        assert (call.type, call.name, call.call_id) == ("function_call", "lookup", "call_7")
        chat = client.chat.completions.create(model="gpt-chat", messages=USER)
        assert chat.choices[0].message.content == "ok"  # nothing scripted: the default
    assert [seen.path for seen in server.requests] == [
        "/v1/responses", "/v1/responses", "/v1/chat/completions"]
    assert server.requests[0].body["stream"] is True
    assert server.requests[0].headers["authorization"] == f"Bearer {server.api_key}"
    assert server.last.body["model"] == "gpt-chat"
    assert [b["input"] for b in server.bodies("responses")] == ["hi", "again"]
    assert server.pending == 0


def test_the_anthropic_sdk_streams_and_calls_through_the_fixture(
        hypha_anthropic_server: AnthropicServer) -> None:
    server = hypha_anthropic_server
    assert server.base_url == server.url
    server.script(Reply.text("Bonjour", chunks=2, usage=(20, 3, 5, 0)), Reply.thinking("hmm"),
                  Reply.error(529, message="busy"))
    with anthropic.Anthropic(base_url=server.base_url, api_key=server.api_key,
                             max_retries=0) as client:
        message = client.messages.create(model="claude-test", max_tokens=50, messages=USER)
        assert message.content[0].type == "text" and message.content[0].text == "Bonjour"
        assert message.usage.cache_read_input_tokens == 5
        with client.messages.stream(model="claude-test", max_tokens=50,
                                    messages=USER) as stream:
            assert [b.type for b in stream.get_final_message().content] == ["thinking", "text"]
        with pytest.raises(anthropic.APIStatusError) as info:
            client.messages.create(model="claude-test", max_tokens=50, messages=USER)
    assert info.value.status_code == 529
    assert [seen.body.get("stream") for seen in server.requests] == [None, True, None]
    headers = server.last.headers
    assert "anthropic-version" in headers
    assert server.api_key in (headers.get("x-api-key"), headers.get("authorization", "")[7:])


def test_routes_can_be_scripted_apart_and_reset(hypha_openai_server: OpenAIServer) -> None:
    server = hypha_openai_server
    server.script(Reply.text("for chat"), route="chat")
    server.script(Reply.text("for responses"), route="responses")
    with openai.OpenAI(base_url=server.base_url, api_key="any", max_retries=0) as client:
        assert client.responses.create(model="m", input="x").output_text == "for responses"
        done = client.chat.completions.create(model="m", messages=USER)
        assert done.choices[0].message.content == "for chat"
        server.default = Reply.text("changed")
        server.script(Reply.text("left behind"), route="messages")
        assert client.responses.create(model="m", input="x").output_text == "changed"
    server.reset()
    assert (server.requests, server.pending, server.default) == ([], 0, Reply.text("ok"))


def test_a_client_that_hangs_up_before_its_answer_prints_nothing(
        hypha_openai_server: OpenAIServer, capfd: pytest.CaptureFixture[str]) -> None:
    """A client's timeout or cancel is not the server's error: no traceback on stderr."""
    server = hypha_openai_server
    server.script(Reply.text("too late", delay_s=0.3), Reply.text("too late", delay_s=0.3))
    body = json.dumps({"model": "m", "messages": USER}).encode()
    host, port = server.url.removeprefix("http://").split(":")
    for served in (1, 2):  # the first write may still land in the kernel's buffer
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                         b"content-type: application/json\r\n"
                         + f"content-length: {len(body)}\r\n\r\n".encode() + body)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        wait_until(lambda: server.stats()["served"] >= served, timeout=5)  # noqa: B023
    time.sleep(0.3)  # the last answer flushed to its reset connection
    assert "Traceback" not in capfd.readouterr().err


def test_env_points_the_sdks_built_without_arguments_at_the_servers(
        hypha_openai_server: OpenAIServer, hypha_anthropic_server: AnthropicServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(hypha_openai_server.env()) == {"OPENAI_BASE_URL", "OPENAI_API_KEY"}
    assert set(hypha_anthropic_server.env()) == {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"}
    assert hypha_openai_server.api_key != hypha_anthropic_server.api_key
    for name, value in {**hypha_openai_server.env(), **hypha_anthropic_server.env()}.items():
        monkeypatch.setenv(name, value)
    hypha_openai_server.script(Reply.text("from openai"))
    hypha_anthropic_server.script(Reply.text("from anthropic"))
    with openai.OpenAI(max_retries=0) as oc, anthropic.Anthropic(max_retries=0) as ac:
        assert oc.responses.create(model="m", input="x").output_text == "from openai"
        block = ac.messages.create(model="m", max_tokens=5, messages=USER).content[0]
        assert block.type == "text" and block.text == "from anthropic"
    assert len(hypha_openai_server.requests) == len(hypha_anthropic_server.requests) == 1


def ask(state: dict[str, Any], question: str, ctx: NodeContext) -> dict[str, Any]:
    gpt = ctx.llm("openai:gpt-test", [{"role": "user", "content": question}])
    claude = ctx.llm("anthropic:claude-test", [{"role": "user", "content": question}],
                     max_output_tokens=20)
    return {"gpt": gpt.text, "claude": claude.text}


def policy(ctx: Any) -> Any:
    return Next("ask", ctx.input) if ctx.step == 0 else Finish(ctx.state)


def test_ctx_llm_of_an_embedded_run_calls_both_servers(
        hypha_factory: Any, hypha_openai_server: OpenAIServer,
        hypha_anthropic_server: AnthropicServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", hypha_openai_server.api_key)
    monkeypatch.setenv("ANTHROPIC_API_KEY", hypha_anthropic_server.api_key)
    hypha_openai_server.script(Reply.text("Paris", chunks=2))
    hypha_anthropic_server.script(Reply.text("Paris, France"))
    hypha: Hypha = hypha_factory(model_base_urls={**hypha_openai_server.base_urls,
                                                  **hypha_anthropic_server.base_urls})
    hypha.register(Graph("qa", {"ask": Node(ask, models=["openai:gpt-test",
                                                         "anthropic:claude-test"])}, policy))
    assert hypha.start("qa", "capital of France?").wait(timeout=30) == {
        "gpt": "Paris", "claude": "Paris, France"}
    assert hypha_openai_server.last.body["input"][0]["content"] == "capital of France?"
    assert hypha_anthropic_server.last.body["max_tokens"] == 20


class Assistant(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["llm"]), {"answers": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({"answers": state["answers"] + 1})


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_a_hosted_agent_backend_answers_from_the_server_env_points_it_at(
        vendor: str, hypha_embedded: Hypha, hypha_openai_server: OpenAIServer,
        hypha_anthropic_server: AnthropicServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server = hypha_openai_server if vendor == "openai" else hypha_anthropic_server
    backend = OpenAIBackend if vendor == "openai" else AnthropicBackend
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    server.script(Reply.text(f"hello from {vendor}", chunks=3))
    agents = hypha_embedded.agents
    agents.start(Assistant, name="assistant", backend=backend, llm={"model": "test-model"})
    ref = agents.tell("assistant", "hi")
    assert wait_until(lambda: agents.poll("assistant", ref).response).text == \
        f"hello from {vendor}"
    assert [seen.path for seen in server.requests] == [
        "/v1/responses" if vendor == "openai" else "/v1/messages"]


def test_each_test_gets_a_fresh_server_stopped_after_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_servers=textwrap.dedent('''
        import urllib.error
        import urllib.request

        import pytest

        seen = []


        def test_one(hypha_openai_server, hypha_anthropic_server):
            assert hypha_openai_server.url != hypha_anthropic_server.url
            hypha_openai_server.script(hypha_openai_server.default)
            seen.append(hypha_openai_server)


        def test_two(hypha_openai_server):
            old = seen[0]
            assert hypha_openai_server is not old and hypha_openai_server.pending == 0
            if old.port != hypha_openai_server.port:
                with pytest.raises(urllib.error.URLError):
                    urllib.request.urlopen(old.url + "/_stats", timeout=2)
            with urllib.request.urlopen(hypha_openai_server.url + "/_stats") as answer:
                assert answer.status == 200
    '''))
    pytester.runpytest_subprocess("-q", "-W", "error").assert_outcomes(passed=2)


def test_the_server_module_runs_without_pytest() -> None:
    code = ("import sys, hypha_celery.testing.llm_server as m; "
            "assert 'pytest' not in sys.modules, 'pytest imported'; "
            "s = m.OpenAIServer().start(); print(s.base_url); s.stop()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.startswith("http://127.0.0.1:") and out.stdout.strip().endswith("/v1")


def test_the_server_runs_as_a_program() -> None:
    with subprocess.Popen([sys.executable, "-W", "error", "-m",
                           "hypha_celery.testing.llm_server", "--port", "0", "--text",
                           "hi there"], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            with openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client:
                assert client.responses.create(model="m", input="x").output_text == "hi there"
        finally:
            proc.terminate()
