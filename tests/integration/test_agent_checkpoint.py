"""The mid-turn checkpoint on real ``celery worker`` processes: a provider session id the
backend acknowledged is in the store before the turn ends, so the worker SIGKILLed right
after the acknowledgment keeps it, and the next turn, on the other worker, has it."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.beat.supervisor import sweep
from hypha_celery.store import agents as rows
from tests.integration.agents_app import Keeper
from tests.integration.conftest import RedisDbs
from tests.integration.helpers import wait_until
from tests.integration.test_agents import FAST, pair

pytestmark = pytest.mark.services

SID = "5d0f7c3a-91b2-4c1e-8a9e-0c6f1e2d3b4a"


@pytest.fixture
def agent_redis(itest_redis: RedisDbs) -> str:
    return itest_redis.dedicated


def test_an_acknowledged_session_id_survives_a_sigkill_and_the_next_turn_sees_it(
        agent_redis: str, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pair(agent_redis, pg_url, tmp_path, monkeypatch) as p:
        tag = f"ack-{uuid.uuid4().hex}"
        name = f"keeper-{uuid.uuid4().hex[:8]}"
        p.client.agents.start(Keeper, name=name, backend=MockBackend, scripts=[
            MockBackend.gate(tag, [BackendEvent.new("result", {"text": "never"})], timeout=60,
                             ack=SID),
            MockBackend.echo_session()])
        ref = p.client.agents.tell(name, "first")
        blocked = MockBackend.wait_blocked(tag, 30)
        assert blocked is not None, p.tail()
        # acknowledged, then blocked: the id is stored while the turn still runs
        stored = rows.read(p.client.store, name)
        assert stored is not None and stored["session"]["session_id"] == SID
        assert p.client.agents.poll(name, ref).status == "pending"
        killed = p.owner_of(blocked["pid"])
        killed.kill()
        began = time.monotonic()

        def recovered() -> bool:
            sweep(p.client._rt, policy=FAST)
            return p.client.agents.poll(name, ref).status != "pending"

        wait_until(recovered, 30, "the supervisor to re-drive the agent", p.tail)
        assert p.client.agents.poll(name, ref).reason == "task_crashed"
        # the next turn runs on the worker that is left, from the stored session
        assert p.client.agents.ask(name, "second", timeout=30).text == SID
        assert [w for w in p.workers if w.proc is not None] != []
        assert time.monotonic() - began < 20
        assert p.client.agents.status(name).agent_state == {
            "outcomes": [["error", "task_crashed"], ["ok", SID]]}
