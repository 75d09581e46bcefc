"""A cancel token reaches a model call blocked on the network (``backends.llm.cancel``):
the official SDK client, over real HTTP to the local provider, returns at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from hypha_celery.backends import BackendError
from hypha_celery.backends.llm import cancel
from hypha_celery.backends.llm import openai as openai_module
from hypha_celery.backends.llm.types import LLMRequest
from tests.fakes.llm_server import FakeLLM, Reply

REQUEST = LLMRequest("gpt-test", ({"role": "user", "content": "hi"},), (), {})


def _open(fake: FakeLLM, token: cancel.CancelToken, out: list[Any]) -> None:
    try:
        with token.held():
            stream = openai_module.open_stream(REQUEST, key=fake.api_key,
                                               base_url=fake.openai_url, timeout=60.0)
        out.append(stream)
        stream.close()
    except BackendError as exc:
        out.append(exc)


def test_a_cancel_ends_a_call_waiting_for_the_providers_response() -> None:
    with FakeLLM(default=Reply.text("late", delay_s=5)) as fake:
        token, out = cancel.CancelToken(), []
        caller = threading.Thread(target=_open, args=(fake, token, out))
        caller.start()
        deadline = time.monotonic() + 10
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fake.requests, "the request never reached the provider"
        time.sleep(0.1)  # the caller now waits for the response's headers
        began = time.monotonic()
        token.cancel()
        caller.join(3)
        assert not caller.is_alive() and time.monotonic() - began < 1.0
        assert isinstance(out[0], BackendError), out


def test_a_call_made_after_the_cancel_sends_nothing() -> None:
    with FakeLLM() as fake:
        token, out = cancel.CancelToken(), []
        token.cancel()
        _open(fake, token, out)
        assert isinstance(out[0], BackendError) and fake.requests == []
        _open(fake, cancel.CancelToken(), out)  # the same pooled client, another token
        assert not isinstance(out[1], BackendError), out


def test_a_pause_ends_at_the_cancel_and_without_a_token_just_sleeps() -> None:
    token = cancel.CancelToken()
    threading.Timer(0.1, token.cancel).start()
    began = time.monotonic()
    with token.held():
        assert not cancel.requested()
        assert cancel.pause(10) is True and cancel.requested()
    assert time.monotonic() - began < 2
    assert not cancel.requested()  # the token is this block's only
    began = time.monotonic()
    assert cancel.pause(0.05) is False and time.monotonic() - began >= 0.05


@pytest.mark.parametrize("nested", [False, True])
def test_a_held_token_is_restored_when_the_block_ends(nested: bool) -> None:
    outer, inner = cancel.CancelToken(), cancel.CancelToken()
    inner.cancel()
    with outer.held():
        if nested:
            with inner.held():
                assert cancel.requested()
        assert not cancel.requested()
