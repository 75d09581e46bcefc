"""Gates over Redis (``HYPHA_MOCK_GATE_URL``): the stream and the test in different
processes, and the session (history, remaining scripts) read back from its JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from hypha_celery.backends import BackendEvent, MockBackend, Response, collect
from hypha_celery.backends.gate import GATE_URL_ENV

pytestmark = pytest.mark.services
ROOT = Path(__file__).resolve().parents[2]

WORKER = """
import json, sys
from hypha_celery.backends import MockBackend, collect
session = json.loads(sys.argv[1])
mock = MockBackend()
stream, session = mock.prompt(session, "from-test")
out = collect("from-test", stream)
print(json.dumps({"session": session, "outcome": out.to_json()}))
"""

RELEASER = ("import sys; from hypha_celery.backends import MockBackend; "
            "MockBackend.release(sys.argv[1])")


@pytest.fixture
def gate_url(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(GATE_URL_ENV, redis_url)
    return redis_url


def reply(t: str) -> list[BackendEvent]:
    return [BackendEvent.new("text", {"text": t}), BackendEvent.new("result", {"text": t})]


def command(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def test_gate_over_redis_in_one_process(gate_url: str) -> None:
    import redis

    tag = f"g-{uuid.uuid4().hex}"
    mock = MockBackend()
    session = mock.start_session({"scripts": [MockBackend.gate(tag, reply("ok"))]})
    stream, _ = mock.prompt(session, "p")
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(collect("p", stream)), daemon=True)
    thread.start()
    assert MockBackend.wait_blocked(tag, timeout=10) is not None
    client = redis.Redis.from_url(gate_url)
    assert client.ttl(f"hypha:mock-gate:{tag}:blocked") == -2  # popped: the key is gone
    client.close()
    MockBackend.release(tag)
    thread.join(10)
    assert isinstance(out[0], Response) and out[0].text == "ok"


def test_stream_blocks_in_another_process_and_history_comes_back(gate_url: str) -> None:
    tag = f"g-{uuid.uuid4().hex}"
    session = MockBackend().start_session(
        {"scripts": [MockBackend.gate(tag, reply("released")), reply("next")]})
    with subprocess.Popen(command(WORKER, json.dumps(session)), cwd=ROOT, text=True,
                          env=os.environ.copy(), stdout=subprocess.PIPE) as proc:
        try:
            blocked = MockBackend.wait_blocked(tag, timeout=30)
            assert blocked is not None and blocked["pid"] == proc.pid
            assert proc.poll() is None  # still held at the gate
            MockBackend.release(tag)
            stdout, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0
    doc = json.loads(stdout)
    assert doc["outcome"]["text"] == "released"
    assert MockBackend.history(doc["session"]) == ["from-test"]
    assert MockBackend.remaining(doc["session"]) == 1
    assert MockBackend.history(session) == []  # the test's copy was never touched


def test_release_from_another_process(gate_url: str) -> None:
    tag = f"g-{uuid.uuid4().hex}"
    mock = MockBackend()
    session = mock.start_session({"scripts": [MockBackend.gate(tag, reply("ok"), timeout=30)]})
    stream, _ = mock.prompt(session, "p")
    subprocess.run(command(RELEASER, tag), cwd=ROOT, env=os.environ.copy(), check=True,
                   timeout=30)
    out = collect("p", stream)
    assert isinstance(out, Response) and out.text == "ok"
