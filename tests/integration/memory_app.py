"""The application of ``test_memory_context.py``, run in a real worker process::

    celery -A tests.integration.memory_app:celery worker -P prefork -c 2 ...

One graph: its node reads its run's user's governed memory while building the context of
a model call (``ctx.llm(..., context=LLMContext(memory=...))``), then writes a record
(``ctx.remember``). The model is the test's fake OpenAI server
(``HYPHA_MODEL_BASE_URLS``).
"""

from __future__ import annotations

from typing import Any

from hypha_celery import Finish, Graph, Hypha, Next, NodeContext, Settings
from hypha_celery.graph.llmcontext import LLMContext

MODEL = "openai:gpt-4.1-mini"


def answer(state: dict[str, Any], question: str, ctx: NodeContext) -> dict[str, Any]:
    reply = ctx.llm(MODEL, [{"role": "user", "content": question}],
                    context=LLMContext(system="Answer in one line.", memory="tea",
                                       total=2000))
    written = ctx.remember(f"asked: {question}", memory_type="episodic")
    return {"answer": reply.text, "written": written.id}


def graph() -> Graph:
    return Graph("imem", {"answer": answer},
                 lambda c: Next("answer", c.input) if c.step == 0 else Finish(c.state),
                 max_steps=3)


hypha = Hypha(Settings.from_env())
hypha.register(graph())
celery = hypha.celery
