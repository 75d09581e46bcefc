"""Governed memory and the context builder on a real ``celery worker`` (prefork) with
Redis and PostgreSQL: a node's model call is built from its run's user's memory (as data,
never in the instructions), sent to the fake provider over HTTP by the official SDK, and
recorded as references; its write lands once; a re-execution serves the read from the
recording after the memory changed."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from hypha_celery.memory import MemoryScope
from hypha_celery.rerun import rerun
from tests.fakes.llm_server import FakeLLM, Reply
from tests.integration import memory_app
from tests.integration.conftest import Dedicated

pytestmark = pytest.mark.services

APP = "tests.integration.memory_app:celery"
PREFERENCE = "Alice drinks green tea, no sugar"


def test_a_worker_builds_the_context_from_the_users_memory(dedicated: Dedicated) -> None:
    user = f"alice-{uuid.uuid4().hex[:8]}"
    with FakeLLM() as fake:
        env = {"HYPHA_MODEL_BASE_URLS": json.dumps({"openai": fake.openai_url}),
               "OPENAI_API_KEY": "sk-local"}
        with dedicated(app=APP, env=env) as s:
            s.client.register(memory_app.graph())
            seeded = s.client.memory.add(MemoryScope(user), "preference", PREFERENCE,
                                         operation_id="pref-1")
            fake.script(Reply.text("Green tea."))
            run = s.client.start("imem", "What tea do I like?", user_id=user)
            result: dict[str, Any] = s.wait(run)
            assert result["answer"] == "Green tea."
            body = fake.requests[-1].body
            assert body["instructions"] == "Answer in one line."
            assert PREFERENCE not in body["instructions"]
            users = [m for m in body["input"] if m["role"] == "user"]
            assert any(PREFERENCE in json.dumps(m) for m in users)

            events = s.client.store.events(run.id)
            kinds = [e.kind for e in events]
            for kind in ("memory.read.completed", "context.build.completed",
                         "memory.write.committed"):
                assert kinds.count(kind) == 1, kinds
            (read,) = [e.data for e in events if e.kind == "memory.read.completed"]
            assert [(r["id"], r["revision"]) for r in read["records"]] == [(seeded.id, 1)]
            facts = json.dumps([e.data for e in events
                                if e.kind.startswith(("memory.", "context."))])
            assert "green tea" not in facts.lower()
            assert sorted(r.id for r in s.client.memory.list(MemoryScope(user))) == \
                sorted([seeded.id, result["written"]])  # the node's write, once
            assert s.client.memory.get(MemoryScope(user), result["written"]).text == \
                "asked: What tea do I like?"

            s.client.memory.update(MemoryScope(user), seeded.id, "Alice drinks coffee",
                                   expected_revision=1, operation_id="pref-2")
            report = rerun(memory_app.graph(), events, memory=s.client.memory)
            assert report.ok, report.divergence
