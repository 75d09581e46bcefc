from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.llm_server import FakeLLM, Reply

# fake_server / fake: the local model server (tests/fakes/llm_server.py) for HTTP backends


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeLLM]:
    """One server per module: stopping one waits out its 0.5 s poll."""
    with FakeLLM() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeLLM) -> Iterator[FakeLLM]:
    """The module's server, with no requests seen and nothing scripted."""
    fake_server.requests.clear()
    fake_server.default = Reply.text("ok")
    yield fake_server
    assert fake_server.pending == 0, "a test left scripted replies behind"
    assert fake_server.wait_closed(5)

