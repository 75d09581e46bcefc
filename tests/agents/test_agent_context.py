"""The context build of agent turns (issue 26): an agent class with ``context =
AgentContext(...)`` has each turn select and activate its skills, search its user's memory
and build the context under a budget before the backend is called; the events go to the
agent's log (ids, counts, hashes; never text); the backend gets the skills as
instructions and the memory as data; another user's memory never appears; a required
skill that fails fails the turn before any backend call; an agent without ``context``
runs as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Hypha
from hypha_celery.agents import Agent, NoReply, Response, TurnFailed
from hypha_celery.agents.context import CONTEXT_CLOSE, CONTEXT_OPEN, AgentContext, memory_query
from hypha_celery.backends import BackendEvent, MockBackend, OpenAIBackend
from hypha_celery.context import MEMORY_HEADER, ContextBudget
from hypha_celery.errors import (
    AgentSpecError,
    ContextSpecError,
    MemoryScopeRequired,
    NotPermitted,
    SkillNotFound,
)
from hypha_celery.memory import MemoryScope
from hypha_celery.skills import SkillRegistry, parse_skill
from tests.backends.hosted_support import KEY, options
from tests.fakes.llm_server import FakeLLM, Reply

TONE = "TONE-SENTINEL: answer in one short sentence."
REFUNDS = "REFUND-SENTINEL: look the order up first."
ALICE = "Alice prefers email about her locker"
BOB = "Bob's locker code is 1234 BOB-SENTINEL"


def skill(name: str, body: str, activation: str = "always", trust: str = "trusted") -> Any:
    return parse_skill(f"---\nname: {name}\ndescription: {name} skill.\n"
                       f"activation: {activation}\ntrust: {trust}\n---\n{body}\n")


SKILLS = SkillRegistry([
    skill("tone", TONE),
    skill("refunds", REFUNDS, "{mode: keyword, keywords: [refund]}"),
    skill("skill.required", "never attached"),
])
PROMPTS: list[str] = []


def reply(prompt: str) -> Iterator[BackendEvent]:
    PROMPTS.append(prompt)
    yield BackendEvent.new("result", {"text": "done"})


class Helper(Agent):
    context = AgentContext(instructions="INSTRUCTIONS-SENTINEL", skills=SKILLS,
                           attached=["tone", "refunds"], memory=True)

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {"scripts": opts.get("scripts", [])}, {}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply(state)


class Strict(Helper):  # scenario 21: a required skill that is not attached
    context = AgentContext(skills=SKILLS, attached=["tone"], required=["skill.required"])


class Plain(Helper):
    context = None


class Hosted(Agent):
    context = AgentContext(instructions="INSTRUCTIONS-SENTINEL", skills=SKILLS,
                           attached=["tone"], memory=True)

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["llm"]), {}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply(state)


@pytest.fixture(autouse=True)
def _prompts() -> None:
    PROMPTS.clear()


def seed(hypha: Hypha) -> tuple[str, str]:
    alice = hypha.memory.add(MemoryScope("alice"), "preference", ALICE, operation_id="a-1")
    bob = hypha.memory.add(MemoryScope("bob"), "semantic", BOB, operation_id="b-1")
    return alice.id, bob.id


def log_of(hypha: Hypha, name: str) -> list[Any]:
    info = hypha.agents.whereis(name)
    assert info is not None
    return list(hypha.store.events(info.incarnation))


WATCHED = ("agent.turn.", "context.", "skill.", "memory.")


def test_a_turn_builds_its_context_before_the_backend(hypha: Hypha) -> None:
    alice_id, bob_id = seed(hypha)
    hypha.agents.start(Helper, name="helper", backend=MockBackend, scripts=[reply],
                       memory_scope=MemoryScope("alice"))
    message = "Where is my locker? I want a refund"
    assert hypha.agents.ask("helper", message, timeout=10).text == "done"

    events = log_of(hypha, "helper")
    kinds = [e.kind for e in events if e.kind.startswith(WATCHED)]
    assert kinds == [
        "agent.turn.started",
        "skill.selected", "skill.loaded", "skill.selected", "skill.loaded",
        "memory.read.requested", "memory.read.completed",
        "context.build.started", "context.build.completed",
        "skill.completed", "skill.completed",
        "agent.turn.completed"]
    (read,) = [e.data for e in events if e.kind == "memory.read.completed"]
    assert [r["id"] for r in read["records"]] == [alice_id]
    (started,) = [e.data for e in events if e.kind == "memory.read.requested"]
    assert started["scope"] == MemoryScope("alice").key
    (built,) = [e.data for e in events if e.kind == "context.build.completed"]
    assert built["items_by_source"] == {"system": 1, "skills": 2, "memory": 1,
                                        "conversation": 1, "tools": 0}

    # the backend got instructions and skills, then memory as data, then the message
    (prompt,) = PROMPTS
    assert prompt.startswith(CONTEXT_OPEN + "\n<instructions>\nINSTRUCTIONS-SENTINEL")
    head, rest = prompt.split('<memory role="data">\n', 1)
    assert TONE in head and REFUNDS in head and ALICE not in head
    memory, after = rest.split("</memory>\n" + CONTEXT_CLOSE + "\n\n", 1)
    assert memory.startswith(MEMORY_HEADER)
    assert json.loads(memory.splitlines()[1])["text"] == ALICE
    assert after == message
    assert bob_id not in prompt and "BOB-SENTINEL" not in prompt

    # no text of the message, a skill or a record in any event
    logged = json.dumps([e.data for e in events])
    for text in (TONE, REFUNDS, ALICE, "INSTRUCTIONS-SENTINEL", "locker"):
        assert text not in logged


def test_a_users_agent_reads_that_users_memory_only(hypha: Hypha) -> None:
    seed(hypha)
    hypha.as_user("bob").agents.start(Helper, name="helper", backend=MockBackend,
                                      scripts=[reply])
    hypha.as_user("bob").agents.ask("helper", "my locker code please", timeout=10)
    (prompt,) = PROMPTS
    assert "BOB-SENTINEL" in prompt and ALICE not in prompt
    with pytest.raises(NotPermitted):
        hypha.as_user("bob").agents.start(Helper, name="other", backend=MockBackend,
                                          memory_scope=MemoryScope("alice"))


def test_a_required_skill_that_fails_fails_the_turn_before_the_backend(hypha: Hypha) -> None:
    hypha.agents.start(Strict, name="strict", backend=MockBackend, scripts=[reply])
    with pytest.raises(TurnFailed) as failed:
        hypha.agents.ask("strict", "hello", timeout=10)
    assert failed.value.reason == "context_build_failed"
    assert failed.value.info == {
        "error": "RequiredSkillFailed",
        "message": "Required skills failed to load: skill.required (Required skill is not "
                   "attached to the agent.)"}
    assert PROMPTS == []  # no backend call
    kinds = [e.kind for e in log_of(hypha, "strict") if e.kind.startswith(WATCHED)]
    assert kinds == ["agent.turn.started", "skill.failed", "skill.selected", "skill.loaded",
                     "context.build.failed", "agent.turn.failed"]


def test_an_agent_without_context_is_unchanged(hypha: Hypha) -> None:
    seed(hypha)
    hypha.agents.start(Plain, name="plain", backend=MockBackend, scripts=[reply])
    hypha.agents.ask("plain", "Where is my locker?", timeout=10)
    assert PROMPTS == ["Where is my locker?"]
    events = log_of(hypha, "plain")
    assert [e.kind for e in events if e.kind.startswith(WATCHED)] == [
        "agent.turn.started", "agent.turn.completed"]
    with pytest.raises(AgentSpecError):
        hypha.agents.start(Plain, name="p2", backend=MockBackend,
                           memory_scope=MemoryScope("alice"))


def test_the_definition_and_the_start_are_checked(hypha: Hypha) -> None:
    with pytest.raises(SkillNotFound):
        AgentContext(skills=SKILLS, attached=["nope"])
    with pytest.raises(ContextSpecError):
        AgentContext(attached=["tone"])  # no registry
    with pytest.raises(ContextSpecError):
        AgentContext(memory=True, memory_limit=0)
    with pytest.raises(ContextSpecError):
        AgentContext(budget=1000)  # type: ignore[arg-type]
    with pytest.raises(MemoryScopeRequired):  # reads memory, no user: refused at start
        hypha.agents.start(Helper, name="nobody", backend=MockBackend)
    assert hypha.agents.whereis("nobody") is None


def test_a_budget_too_small_fails_the_turn(hypha: Hypha) -> None:
    class Tight(Helper):
        context = AgentContext(instructions="x " * 200, budget=ContextBudget(50))

    hypha.agents.start(Tight, name="tight", backend=MockBackend, scripts=[reply])
    with pytest.raises(TurnFailed) as failed:
        hypha.agents.ask("tight", "hello", timeout=10)
    assert failed.value.info["error"] == "BudgetTooSmall"
    assert PROMPTS == []


def test_the_default_memory_query() -> None:
    assert memory_query("Where is my locker? my LOCKER, a-b") == "where OR locker"
    assert memory_query("a b c") is None


# -- a hosted backend, the official SDK over HTTP to the local model server ---------------------
@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with FakeLLM() as server:
        server.default = Reply.text("ok")
        yield server


def test_a_hosted_backend_gets_instructions_as_system_and_memory_as_data(
        hypha: Hypha, fake: FakeLLM) -> None:
    seed(hypha)
    hypha.as_user("alice").agents.start(
        Hosted, name="hosted", backend=OpenAIBackend,
        llm=options(fake, "chat", system="BACKEND-SYSTEM"))
    agents = hypha.as_user("alice").agents
    assert agents.ask("hosted", "where is my locker", timeout=10).text == "ok"
    assert agents.ask("hosted", "thanks", timeout=10).text == "ok"

    first, second = (r.body["messages"] for r in fake.requests)
    system = first[0]
    assert system["role"] == "system"
    assert system["content"].startswith("BACKEND-SYSTEM\n\nINSTRUCTIONS-SENTINEL")
    assert TONE in system["content"] and ALICE not in system["content"]
    user = first[1]
    assert user["role"] == "user"
    assert user["content"].startswith(MEMORY_HEADER) and ALICE in user["content"]
    assert user["content"].endswith("\n\nwhere is my locker")
    # the stored history keeps the message as given: the next request has no old memory
    assert [m["content"] for m in second[1:]] == ["where is my locker", "ok", "thanks"]
    assert second[0]["content"].startswith("BACKEND-SYSTEM\n\nINSTRUCTIONS-SENTINEL")
    logged = json.dumps([e.data for e in log_of(hypha, "alice/hosted")])
    assert ALICE not in logged and TONE not in logged


def test_the_build_on_every_store(store_url: str) -> None:
    """The same turn on SQLite and PostgreSQL (a shared database: users of their own)."""
    from uuid import uuid4

    from tests.runtime.support import embedded

    user, other = f"u-{uuid4().hex}", f"o-{uuid4().hex}"
    hypha = embedded(store_url)
    try:
        hypha.memory.add(MemoryScope(user), "preference", ALICE, operation_id=f"{user}-1")
        hypha.memory.add(MemoryScope(other), "semantic", BOB, operation_id=f"{other}-1")
        agents = hypha.as_user(user).agents
        agents.start(Helper, name="helper", backend=MockBackend, scripts=[reply])
        agents.ask("helper", "Where is my locker? I want a refund", timeout=10)
        (prompt,) = PROMPTS
        assert ALICE in prompt and "BOB-SENTINEL" not in prompt and REFUNDS in prompt
        kinds = [e.kind for e in log_of(hypha, f"{user}/helper")
                 if e.kind.startswith(("context.build", "memory.read"))]
        assert kinds == ["memory.read.requested", "memory.read.completed",
                         "context.build.started", "context.build.completed"]
        agents.stop("helper")
    finally:
        hypha.close()


def test_the_agent_page_shows_what_went_into_the_turn(hypha: Hypha) -> None:
    """The console's agent page lists the turn's context build, skills and memory read:
    sizes and references, never their text."""
    from tests.console.support import app_for, client, tokens

    alice_id, _ = seed(hypha)
    hypha.agents.start(Helper, name="helper-page", backend=MockBackend, scripts=[reply],
                       memory_scope=MemoryScope("alice"))
    try:
        hypha.agents.ask("helper-page", "my locker and a refund", timeout=10)
        t = tokens()
        page = client(app_for(hypha, t), t.admin).get("/agents/helper-page").text
    finally:
        hypha.agents.stop("helper-page")
    turns = page.split('id="turns"', 1)[1].split("</table>", 1)[0]
    assert "context.build.completed" in turns and " tokens (system " in turns
    assert f"{alice_id}@1" in turns and "tone@" in turns and "refunds@" in turns
    assert ALICE not in page and TONE not in page and REFUNDS not in page
