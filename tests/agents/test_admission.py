"""Admission is atomic across processes: 20 concurrent tells from separate processes
against a prompt queue of 3 give exactly 3 accepted (PostgreSQL and SQLite stores, a
real Redis broker)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from hypha_celery import Hypha, Settings
from hypha_celery.agents import Agent, NoReply, Overloaded, Response
from hypha_celery.backends import BackendEvent, MockBackend
from tests.integration.helpers import REPO, clean_env, purge

CALLERS = 20
CAP = 3

pytestmark = pytest.mark.services


class Idle(Agent):
    def init_agent(self, opts: dict[str, object]) -> tuple[dict[str, object], object]:
        return {"scripts": [[BackendEvent.new("result", {"text": "ok"})]]}, {}

    def handle_response(self, ref: str, response: Response, state: object) -> NoReply:
        return NoReply(state)


@pytest.fixture(params=["postgresql", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hypha.db'}"
    return str(request.getfixturevalue("pg_url"))


#: Seconds every caller process may take, start-up included.
CALLER_TIMEOUT = 240


def test_twenty_concurrent_tells_from_separate_processes_against_a_cap_of_three(
        redis_url: str, store: str) -> None:
    hypha = Hypha(Settings(broker_url=redis_url, result_backend=redis_url, store_url=store,
                           embedded=False))
    name = f"busy-{uuid.uuid4().hex[:8]}"
    try:
        hypha.store.migrate()
        hypha.agents.start(Idle, name=name, backend=MockBackend, max_pending_prompts=CAP)
        hypha.agents.tell(name, "first")  # no worker runs here: it stays the active turn
        assert hypha.agents.status(name).state == "processing"
        at = time.time() + 3.0  # every caller is up and connected by then
        procs = [subprocess.Popen([sys.executable, "-m", "tests.agents.teller", redis_url,
                                   store, name, str(at)], cwd=REPO, env=clean_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(CALLERS)]
        try:  # twenty interpreters importing the package: slow on a busy 2-core machine
            outs = [p.communicate(timeout=CALLER_TIMEOUT) for p in procs]
        finally:  # a timeout leaves no process and no open pipe behind
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.communicate()
        assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
        lines = [out.strip() for out, _ in outs]
        accepted = [ln for ln in lines if ln.startswith("accepted ")]
        refused = [json.loads(ln.split(" ", 1)[1]) for ln in lines
                   if ln.startswith("overloaded ")]
        assert (len(accepted), len(refused)) == (CAP, CALLERS - CAP), lines
        assert all(info == {"queue": "prompts", "limit": "count", "pending_count": CAP,
                            "pending_bytes": CAP * 12, "incoming_bytes": 12,
                            "max_count": CAP, "max_bytes": 1_048_576} for info in refused)
        snapshot = hypha.agents.runtime_snapshot(name)
        assert snapshot["pending_prompts"] == CAP
        assert len({ln.split()[1] for ln in accepted}) == CAP  # refs are never reused
    finally:
        purge(redis_url, sorted(hypha.queues()))
        hypha.close()


def test_byte_cap_and_zero_cap(redis_url: str, store: str) -> None:
    hypha = Hypha(Settings(broker_url=redis_url, result_backend=redis_url, store_url=store,
                           embedded=False))
    try:
        hypha.store.migrate()
        for name, opts in (("bytes", {"max_pending_prompt_bytes": 30}),
                           ("zero", {"max_pending_prompts": 0})):
            name = f"{name}-{uuid.uuid4().hex[:8]}"
            hypha.agents.start(Idle, name=name, backend=MockBackend, **opts)
            hypha.agents.tell(name, "active")
            if "max_pending_prompts" in opts:
                with pytest.raises(Overloaded) as zero:
                    hypha.agents.tell(name, "x")
                assert zero.value.info["limit"] == "count"
                assert zero.value.info["max_count"] == 0
                continue
            hypha.agents.tell(name, "a" * 10)  # 12 bytes as JSON
            hypha.agents.tell(name, "b" * 10)  # 24
            with pytest.raises(Overloaded) as full:
                hypha.agents.tell(name, "c" * 10)  # 36 > 30
            assert full.value.info == {"queue": "prompts", "limit": "bytes",
                                       "pending_count": 2, "pending_bytes": 24,
                                       "incoming_bytes": 12, "max_count": 1000,
                                       "max_bytes": 30}
    finally:
        purge(redis_url, sorted(hypha.queues()))
        hypha.close()
