"""Tools for a model call, in every form the docs accept: a ``ToolSpec``, its JSON
(``id``, ``description``, ``input_schema``; no side-effect level needed), a ``ToolDecl``
or its JSON (``name``, ``description``, ``parameters``), and ``None`` for none -- through
``ctx.llm`` in a real embedded run, ``LLMClient`` and the hosted agent backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Finish, Graph, Hypha, Next, Node, NodeContext, Settings
from hypha_celery.backends import BackendError, OpenAIBackend
from hypha_celery.backends.llm import ToolDecl
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.errors import RunFailed
from hypha_celery.tools import ToolSpec
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT

MODEL = "openai:gpt-test"
SCHEMA = {"type": "object", "required": ["a", "b"],
          "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
#: docs/models.md's agent example tool: a ToolSpec's JSON, no side_effect
MULTIPLY = {"id": "math.multiply", "description": "Multiply two numbers.",
            "input_schema": SCHEMA}
FORMS: dict[str, Any] = {
    "toolspec_json": [MULTIPLY],
    "toolspec": [ToolSpec(id="math.multiply", description="Multiply two numbers.",
                          input_schema=SCHEMA, side_effect="none")],
    "toolspec_dump": [ToolSpec(id="math.multiply", description="Multiply two numbers.",
                               input_schema=SCHEMA, side_effect="read").model_dump()],
    "tooldecl": [ToolDecl("math.multiply", "Multiply two numbers.", SCHEMA)],
    "tooldecl_json": [{"name": "math.multiply", "description": "Multiply two numbers.",
                       "parameters": SCHEMA}],
    "tuple": (MULTIPLY,),
}
WIRE = [{"type": "function", "name": "math_multiply", "description": "Multiply two numbers.",
         "parameters": SCHEMA, "strict": False}]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-tools")
    with FakeLLM() as server:
        yield server


def run_with(sqlite_url: str, fake: FakeLLM, tools: Any) -> tuple[Any, list[Any]]:
    def ask(state: dict[str, Any], question: str, ctx: NodeContext) -> dict[str, Any]:
        reply = ctx.llm(MODEL, [{"role": "user", "content": question}], tools=tools)
        return {"text": reply.text, "calls": [c.to_json() for c in reply.tool_calls]}

    def policy(ctx: Any) -> Any:
        return Next("ask", ctx.input) if ctx.step == 0 else Finish(ctx.state)

    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=sqlite_url, embedded=True),
              llm=LLMClient(base_urls={"openai": fake.openai_url}))
    try:
        h.register(Graph("tools", {"ask": Node(ask, models=[MODEL])}, policy))
        run = h.start("tools", "6 x 7?")
        try:
            return run.wait(WAIT), run.events()
        except RunFailed:
            return None, run.events()
    finally:
        h.close()


@pytest.mark.parametrize("form", sorted(FORMS))
def test_ctx_llm_sends_every_accepted_tool_form(sqlite_url: str, fake: FakeLLM,
                                                form: str) -> None:
    fake.script(Reply.tool_call("math_multiply", {"a": 6, "b": 7}))
    result, events = run_with(sqlite_url, fake, FORMS[form])
    failed = [e.payload for e in events if e.type == "node.execution.failed"]
    assert result is not None, failed
    assert result["calls"] == [{"id": "call_1", "name": "math.multiply",
                                "arguments": {"a": 6, "b": 7}}]  # dotted again
    assert fake.requests[0].body["tools"] == WIRE


@pytest.mark.parametrize("tools", [None, [], ()])
def test_ctx_llm_takes_none_for_no_tools(sqlite_url: str, fake: FakeLLM, tools: Any) -> None:
    fake.script(Reply.text("42"))
    result, _ = run_with(sqlite_url, fake, tools)
    assert result == {"text": "42", "calls": []}
    assert "tools" not in fake.requests[0].body


@pytest.mark.parametrize(("bad", "says"), [
    ([{"description": "no name"}], "id"),
    ([{"id": "x.y"}], "input_schema"),
    ([{"id": "x.y", "input_schema": {"type": "string"}}], "object"),
    ([MULTIPLY, {**MULTIPLY, "id": "math_multiply"}], "same wire name"),
    (["math.multiply"], "str"),
    (MULTIPLY, "list"),
])
def test_a_bad_tool_is_invalid_tool_where_the_call_is_written(bad: Any, says: str) -> None:
    with pytest.raises(BackendError) as caught:
        LLMClient().request(MODEL, [{"role": "user", "content": "hi"}], bad)
    assert caught.value.kind == "invalid_tool" and not caught.value.retryable
    assert caught.value.error_class == "validation" and says in caught.value.message


def test_a_bad_tool_fails_the_node_as_a_validation_error(sqlite_url: str,
                                                         fake: FakeLLM) -> None:
    result, events = run_with(sqlite_url, fake, [{"description": "no name"}])
    assert result is None and fake.requests == []
    failed = next(e.payload for e in events if e.type == "node.execution.failed")
    assert failed["error"]["type"] == "BackendError"
    assert failed["error"]["class"] == "validation"


@pytest.mark.parametrize("form", sorted(FORMS))
def test_hosted_backends_store_every_form_as_the_same_json(form: str,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-tools")
    opts = OpenAIBackend().check_options({"model": "gpt-test", "tools": FORMS[form]})
    assert opts["tools"] == [{"name": "math.multiply", "description": "Multiply two numbers.",
                              "parameters": SCHEMA}]


def test_hosted_backends_take_none_for_no_tools() -> None:
    assert "tools" not in OpenAIBackend().check_options({"model": "gpt-test", "tools": None})
