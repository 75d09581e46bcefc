"""A node's governed memory (``ctx.recall`` / ``ctx.remember``) on both stores: the run's
user's scope only, recorded as ``memory.*`` events with references (never text), and
served from the recording when the run is re-executed."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from hypha_celery import Finish, Graph, Hypha, Next, NodeContext, RunFailed
from hypha_celery.memory import MemoryScope
from hypha_celery.rerun import rerun
from tests.runtime.support import WAIT, running

SECRET = "the vault code is 7261"


def _learn(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
    done = ctx.remember(inp["fact"], memory_type="semantic", tags=["vault"])
    return {"written": [done.id, done.revision]}


def _ask(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
    hits = ctx.recall(inp["query"], limit=3)
    return {"recalled": [[h.id, h.revision, h.text] for h in hits]}


def _policy(node: str) -> Any:
    return lambda c: Next(node, c.input) if c.step == 0 else Finish(c.state)


LEARN = Graph(id="learn", nodes={"learn": _learn}, decision_policy=_policy("learn"),
              max_steps=3)
ASK = Graph(id="ask", nodes={"ask": _ask}, decision_policy=_policy("ask"), max_steps=3)


@pytest.fixture
def ana() -> str:
    """This test's user (PostgreSQL: the session's database is shared by other tests)."""
    return f"ana-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def hypha(store_url: str) -> Any:
    with running(store_url) as h:
        h.register(LEARN)
        h.register(ASK)
        yield h


def _payloads(hypha: Hypha, run_id: str, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.payload) for e in hypha.store.events(run_id)
            if e.type.startswith(prefix)]


def test_a_node_writes_and_reads_its_users_memory_by_reference(hypha: Hypha,
                                                                ana: str) -> None:
    learned = hypha.start("learn", {"fact": SECRET}, user_id=ana, session_id="s1")
    record_id, revision = learned.wait(WAIT)["written"]
    writes = _payloads(hypha, learned.id, "memory.")
    assert [k for k, _ in writes] == ["memory.write.requested", "memory.write.validated",
                                      "memory.write.committed"]
    assert writes[2][1]["record_id"] == record_id and writes[2][1]["revision"] == revision

    asked = hypha.start("ask", {"query": "vault code"}, user_id=ana, session_id="s1")
    assert asked.wait(WAIT)["recalled"] == [[record_id, 1, SECRET]]
    reads = _payloads(hypha, asked.id, "memory.")
    assert [k for k, _ in reads] == ["memory.read.requested", "memory.read.completed"]
    assert [(r["id"], r["revision"]) for r in reads[1][1]["records"]] == [(record_id, 1)]
    logs = json.dumps([e.payload for r in (learned.id, asked.id)
                       for e in hypha.store.events(r) if not e.type.startswith("run.")
                       and not e.type.startswith("node.")])
    assert "7261" not in logs and "vault code" not in logs  # text and query: never

    other = hypha.start("ask", {"query": "vault code"}, user_id=f"bob-{ana}")
    assert other.wait(WAIT)["recalled"] == []  # another user's memory: nothing

    # a re-execution of the write serves its recorded result: nothing is written again
    assert rerun(LEARN, hypha.store.events(learned.id), memory=hypha.memory).ok
    assert len(hypha.memory.list(MemoryScope(ana, session_id="s1"))) == 1


def test_a_run_without_a_user_has_no_memory(hypha: Hypha) -> None:
    run = hypha.start("ask", {"query": "vault"})
    with pytest.raises(RunFailed) as failed:
        run.wait(WAIT)
    assert "MemoryScopeRequired" in str(failed.value)


def test_a_re_execution_serves_the_recorded_revisions(hypha: Hypha, ana: str) -> None:
    record = hypha.memory.add(MemoryScope(ana), "semantic", SECRET, operation_id="seed")
    asked = hypha.start("ask", {"query": "vault"}, user_id=ana)
    assert asked.wait(WAIT)["recalled"] == [[record.id, 1, SECRET]]
    # the memory changes after the run: a new revision, and a second matching record
    hypha.memory.update(MemoryScope(ana), record.id, "the vault code is 0000",
                        expected_revision=1, operation_id="change")
    hypha.memory.add(MemoryScope(ana), "semantic", "vault code rotated",
                     operation_id="more")
    events = hypha.store.events(asked.id)
    report = rerun(ASK, events, memory=hypha.memory)
    assert report.ok and report.executions == 1, report.divergence
    # without the memory, a re-execution cannot read the records back: it says so
    blind = rerun(ASK, events)
    assert blind.ok is False and blind.divergence is not None


ATTEMPTS: list[int] = []


def _flaky_learn(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
    done = ctx.remember(inp["fact"], memory_type="semantic")
    ATTEMPTS.append(ctx.attempt)
    if ctx.attempt == 1:
        raise ConnectionError("lost the network after the write")
    return {"written": [done.id, done.revision, done.reused]}


def test_a_retried_node_writes_once(hypha: Hypha, ana: str) -> None:
    from hypha_celery import Node, RetryPolicy

    ATTEMPTS.clear()
    hypha.register(Graph(
        id="flaky", nodes={"learn": Node(_flaky_learn, retry=RetryPolicy(
            max_attempts=2, backoff=0.01, retry_on=("transient",)))},
        decision_policy=_policy("learn"), max_steps=3))
    run = hypha.start("flaky", {"fact": SECRET}, user_id=ana)
    record_id, revision, reused = run.wait(WAIT)["written"]
    assert ATTEMPTS == [1, 2] and revision == 1 and reused is True
    assert [r.id for r in hypha.memory.list(MemoryScope(ana))] == [record_id]
