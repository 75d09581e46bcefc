"""A run's page shows what went into each model call: tokens per source, compaction,
skills and memory references -- recorded by a node as facts, never content."""

from __future__ import annotations

from typing import Any

from hypha_celery import Finish, Graph, Hypha, Next, NodeContext
from hypha_celery.events import payloads as ev
from tests.console.support import Tokens, app_for, client
from tests.runtime.support import WAIT

MEMORY_TEXT = "the user prefers metric units"


def _call(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
    ctx.emit(ev.ContextBuildStarted(
        build_id="b1", step=1, purpose="llm", budget=1000,
        budgets={"system": 200, "memory": 300, "conversation": 500},
        candidates={"system": 1, "memory": 2, "conversation": 4}, tokenizer="o200k_base"))
    ctx.emit(ev.SkillLoaded(skill_id="units", version="1.2.0", build_id="b1",
                            content_hash="sha256:11", chars=400, tokens=90))
    ctx.emit(ev.MemoryReadCompleted(step=1, operation_id="op1",
                                    records=[{"id": "m7", "revision": 3}]))
    ctx.emit(ev.ContextCompacted(build_id="b1", step=1, source="conversation",
                                 strategy="drop_oldest", items_before=4, items_after=2,
                                 tokens_before=800, tokens_after=480))
    ctx.emit(ev.ContextBuildCompleted(
        build_id="b1", step=1, items=5, tokens=770,
        tokens_by_source={"system": 200, "memory": 90, "conversation": 480},
        items_by_source={"system": 1, "memory": 2, "conversation": 2}, dropped=2,
        compacted=1, context_hash="sha256:" + "ab" * 32))
    return {"answer": "ok"}


GRAPH = Graph(id="ctxpage", nodes={"call": _call},
              decision_policy=lambda c: Next("call", c.input) if c.step == 0
              else Finish(c.state), max_steps=3)


def test_the_page_shows_what_went_into_the_model_call(hypha: Hypha, t: Tokens) -> None:
    hypha.register(GRAPH)
    run = hypha.start("ctxpage", {"q": MEMORY_TEXT})
    assert run.wait(WAIT) == {"answer": "ok"}
    page = client(app_for(hypha, t), t.admin).get(f"/runs/{run.id}").text
    section = page[page.index('id="contexts"'):page.index("</table>", page.index('id="contexts"'))]
    assert "<code>b1</code> completed" in section
    assert "770 tokens, 5 items, 2 dropped" in section
    assert "<b>conversation</b> 480 (2)" in section and "<b>memory</b> 90 (2)" in section
    assert "conversation: drop_oldest 4 -&gt; 2 items, 800 -&gt; 480 tokens" in section
    assert "units@1.2.0" in section and "m7@3" in section
    assert "sha256:abababababab" in section
    assert MEMORY_TEXT not in page  # the input is content: hidden
