"""A provider's raw thinking never reaches the store, the logs, the spans, the console or
the JSONL export (issue 26 point 4): a unique sentinel is put in the thinking of every
backend, each driven through the real path, and then looked for everywhere.

* ``ctx.llm`` in a graph node: Anthropic thinking blocks, OpenAI Responses reasoning
  items (summary deltas, and ``reasoning_text`` deltas), OpenAI Chat ``reasoning_content``
  (the fake model server over loopback HTTP, the official SDKs);
* ReAct on :class:`LLMProvider` (Anthropic) and on :class:`MockProvider` (scripted
  thinking);
* agent turns on the hosted backends (Anthropic, OpenAI Responses and Chat) and, in their
  own test, on the real Claude Code and Codex CLIs against the same fake server.

Each on SQLite and on a PostgreSQL database of its own, with logging at DEBUG, a tracing
middleware exporting to memory, the console's run and agent pages rendered with content
shown and hidden, and the JSONL export written. What is then asserted: ``thinking.completed``
was written with ``chars > 0`` (the thinking was reported, as a count), and the sentinel is
in no table, log line, span (name, attributes, events), page or export line.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis  # noqa: F401  # before trio: its entry point warns when imported at exit
import pytest
import sqlalchemy as sa
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hypha_celery import Finish, Graph, Hypha, Next, NodeContext, Principal, Settings
from hypha_celery.agents import Agent, NoReply, Response
from hypha_celery.backends import AnthropicBackend, OpenAIBackend
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.console import ConsoleConfig, create_app
from hypha_celery.exchange import export_jsonl
from hypha_celery.react import LLMProvider, MockProvider, react_graph
from hypha_celery.tools import ToolRegistry
from hypha_celery.tracing import TracingMiddleware
from tests.backends.cli_support import CLAUDE, CODEX
from tests.fakes.clis import installed_clis
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT

SENTINEL = f"SENTINEL-THINK-{uuid.uuid4().hex}"
KEY = "sk-test-thinking-sentinel-0123456789"
ADMIN = "t" * 8 + uuid.uuid4().hex
#: ctx.llm's calls, in the node's order: (model, raw Responses reasoning_text)
LLM_CALLS = [("anthropic:claude-test", False), ("openai:gpt-test", False),
             ("openai:gpt-test", True), ("openai-chat:gpt-test", False)]
HOSTED = {"anthropic": (AnthropicBackend, {"model": "claude-test"}),
          "responses": (OpenAIBackend, {"model": "gpt-test"}),
          "chat": (OpenAIBackend, {"model": "gpt-test", "api": "chat"})}


def thought(text: str = "fine", raw: bool = False) -> Reply:
    return Reply.thinking(f"I think {SENTINEL} therefore", text=text, raw=raw)


class Assistant(Agent):
    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["llm"]), {}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply(state)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hypha.db'}"
    return str(request.getfixturevalue("fresh_pg"))  # a database of this test's own


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with FakeLLM() as server:
        server.default = thought()  # any call a CLI makes on its own thinks too
        yield server


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def hypha(url: str, fake: FakeLLM, tracer: TracerProvider,
          caplog: pytest.LogCaptureFixture) -> Iterator[Hypha]:
    caplog.set_level(logging.DEBUG)
    h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                       store_url=url, embedded=True),
              middleware=[TracingMiddleware(tracer)],
              llm=LLMClient(base_urls={"openai": fake.openai_url, "anthropic": fake.url}))
    try:
        yield h
    finally:
        h.close()


def llm_graph() -> Graph:
    def think(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"answers": [ctx.llm(model, [{"role": "user", "content": "hi"}]).text
                            for model, _ in LLM_CALLS]}

    def policy(ctx: Any) -> Any:
        return Next("think", ctx.input) if ctx.step == 0 else Finish(ctx.state["answers"])
    return Graph(id="think", nodes={"think": think}, decision_policy=policy)


def test_no_backends_thinking_reaches_store_logs_spans_console_or_export(
        hypha: Hypha, fake: FakeLLM, url: str, tracer: TracerProvider,
        exporter: InMemorySpanExporter,
        caplog: pytest.LogCaptureFixture) -> None:
    runs = []
    # ctx.llm on every provider
    fake.script(*(thought(f"answer {i}", raw) for i, (_, raw) in enumerate(LLM_CALLS)))
    hypha.register(llm_graph())
    run = hypha.start("think", {})
    assert run.wait(WAIT) == [f"answer {i}" for i in range(len(LLM_CALLS))]
    runs.append((run.id, len(LLM_CALLS)))
    # ReAct on a real provider, and on the scripted one
    fake.script(thought("hypha is a framework"))
    hypha.register(react_graph(LLMProvider("anthropic:claude-test"), ToolRegistry(),
                               graph_id="react-llm"))
    run = hypha.start("react-llm", {"question": "what is hypha?"})
    assert run.wait(WAIT) == {"answer": "hypha is a framework", "iterations": 1}
    runs.append((run.id, 1))
    mock = MockProvider([MockProvider.thinking({"action": "finish", "output": "done"},
                                               f"mock {SENTINEL}")])
    hypha.register(react_graph(mock, ToolRegistry(), graph_id="react-mock"))
    run = hypha.start("react-mock", {"question": "what is hypha?"})
    assert run.wait(WAIT) == {"answer": "done", "iterations": 1}
    runs.append((run.id, 1))
    # agent turns on the hosted backends
    for name, (backend, options) in HOSTED.items():
        url_of = fake.url if backend is AnthropicBackend else fake.openai_url
        hypha.agents.start(Assistant, name=name, backend=backend,
                           llm={**options, "base_url": url_of})
        fake.script(thought(f"from {name}"))
        assert hypha.agents.ask(name, "hi", timeout=WAIT).text == f"from {name}"

    for run_id, calls in runs:
        assert_thinking_counted(hypha, run_id, calls)
    for name in HOSTED:
        assert_thinking_counted(hypha, incarnation(hypha, name), 1)
    assert_nowhere(hypha, url, tracer, exporter, caplog, [r for r, _ in runs], list(HOSTED))


def test_no_cli_thinking_reaches_store_logs_spans_console_or_export(
        hypha: Hypha, fake: FakeLLM, url: str, tracer: TracerProvider,
        exporter: InMemorySpanExporter,
        caplog: pytest.LogCaptureFixture, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    clis = installed_clis()
    for cli in (CLAUDE, CODEX):
        monkeypatch.setenv(cli.key_env, cli.secret)
        home = tmp_path / cli.name
        home.mkdir()
        if cli.makes_state_dir:
            (home / cli.state_dir).mkdir()
        agent_options = cli.options(str(clis / cli.name), fake, home)
        hypha.agents.start(Assistant, name=cli.name, backend=cli.backend, llm=agent_options)
        fake.script(thought(f"from {cli.name}"))
        assert hypha.agents.ask(cli.name, "hi", timeout=WAIT).text == f"from {cli.name}"
        assert_thinking_counted(hypha, incarnation(hypha, cli.name), 1)
    assert_nowhere(hypha, url, tracer, exporter, caplog, [], [CLAUDE.name, CODEX.name])


# -- the checks ---------------------------------------------------------------------------
def incarnation(hypha: Hypha, name: str) -> str:
    info = hypha.agents.whereis(name)
    assert info is not None
    return info.incarnation


def assert_thinking_counted(hypha: Hypha, log_id: str, at_least: int) -> None:
    done = [e.data for e in hypha.store.events(log_id) if e.kind == "thinking.completed"]
    assert len(done) >= at_least, (log_id, done)
    assert all(d["chars"] > 0 and d.get("summary") is None for d in done), done


def assert_nowhere(hypha: Hypha, url: str, tracer: TracerProvider,
                   exporter: InMemorySpanExporter,
                   caplog: pytest.LogCaptureFixture, runs: list[str],
                   agents: list[str]) -> None:
    tracer.force_flush()  # hypha hands its spans to the processor every 0.5 s, or now
    places = {"tables": tables(url), "logs": caplog.text,
              "spans": spans(exporter.get_finished_spans()),
              "console": console(hypha, runs, agents), "jsonl": exported(hypha)}
    assert places["tables"] and places["console"]
    if runs:  # agent turns make no spans, and the export holds runs
        assert places["spans"] and places["jsonl"]
    leaked = [where for where, text in places.items() if SENTINEL in text]
    assert not leaked, f"the provider's thinking reached {leaked}"


def tables(url: str) -> str:
    """Every row of every table of the store, as text."""
    engine = sa.create_engine(url)
    out: list[str] = []
    try:
        inspector = sa.inspect(engine)
        schemas = [s for s in inspector.get_schema_names()
                   if s not in ("information_schema", "pg_catalog")] \
            if engine.dialect.name == "postgresql" else [None]
        with engine.connect() as db:
            for schema in schemas:
                for name in inspector.get_table_names(schema=schema):
                    table = sa.Table(name, sa.MetaData(), schema=schema, autoload_with=db)
                    out.extend(f"{name} {cells(row)}" for row in db.execute(sa.select(table)))
    finally:
        engine.dispose()
    return "\n".join(out)


def cells(row: sa.Row[Any]) -> str:
    """A row's values in full (a Row's repr cuts long values short)."""
    return " ".join(v.decode("utf-8", "replace") if isinstance(v, bytes)
                    else json.dumps(v, default=str) for v in row)


def spans(finished: tuple[ReadableSpan, ...]) -> str:
    return "\n".join(
        f"{s.name} {dict(s.attributes or {})!r} "
        f"{[(e.name, dict(e.attributes or {})) for e in s.events]!r}" for s in finished)


def console(hypha: Hypha, runs: list[str], agents: list[str]) -> str:
    from starlette.testclient import TestClient

    pages: list[str] = []
    for shown in (True, False):
        app = create_app(hypha, ConsoleConfig(tokens={ADMIN: Principal.admin("ops")},
                                              show_content=shown))
        with TestClient(app, base_url="http://testserver",
                        headers={"accept": "text/html"}) as c:
            assert c.post("/login", data={"token": ADMIN, "next": "/runs"},
                          follow_redirects=False).status_code == 303
            for page in ["/runs", "/agents", *(f"/runs/{r}" for r in runs),
                         *(f"/agents/{a}" for a in agents)]:
                r = c.get(page)
                assert r.status_code == 200, (page, r.status_code)
                pages.append(r.text)
    return "\n".join(pages)


def exported(hypha: Hypha) -> str:
    out = io.StringIO()
    export_jsonl(hypha.store, out)
    text = out.getvalue()
    for line in text.splitlines():
        json.loads(line)
    return text
