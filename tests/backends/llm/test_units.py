"""Model references, key resolution and error classification (no server needed)."""

from __future__ import annotations

import email.utils
import os
import subprocess
import sys
import time
import warnings

import pytest

from hypha_celery.backends import BackendError
from hypha_celery.backends.llm import errors
from hypha_celery.backends.llm.keys import (
    register_key_source,
    resolve_key,
    unregister_key_source,
)
from hypha_celery.backends.llm.ref import ModelRef, provider
from hypha_celery.backends.llm.types import ToolDecl
from hypha_celery.backends.llm.wire import ToolNames
from hypha_celery.errors import HyphaError, InvalidModelRef, SpecError

SECRET = "sk-SENTINEL-unit-0123456789"


# -- model references ----------------------------------------------------------------------
def test_a_reference_unpacks_as_provider_and_model() -> None:
    provider_name, model = ModelRef.parse("openai:gpt-4.1-mini")
    assert (provider_name, model) == ("openai", "gpt-4.1-mini")
    ref = ModelRef.parse("openai-chat:llama3:8b")  # the model keeps its own colons
    assert (ref.model, ref.vendor, ref.options, str(ref)) == (
        "llama3:8b", "openai", {"api": "chat"}, "openai-chat:llama3:8b")
    assert ModelRef.parse(ref) == ref
    assert ref.unknown_options({"temperature": 1, "thinking_budget": 9}) == ["thinking_budget"]
    assert ModelRef.parse("anthropic:claude-x").vendor == "anthropic"
    assert ref.request(({"role": "user", "content": "x"},), max_output_tokens=5).options == {
        "api": "chat", "max_output_tokens": 5}


@pytest.mark.parametrize("bad", ["gpt-4o", "nope:model", "openai:", "openai: x", ":x", 42,
                                 "OpenAI:gpt"])
def test_a_bad_reference_is_a_spec_error(bad: object) -> None:
    with pytest.raises(InvalidModelRef) as caught:
        ModelRef.parse(bad)  # type: ignore[arg-type]
    assert isinstance(caught.value, SpecError | ValueError) and isinstance(caught.value,
                                                                            HyphaError)


def test_provider_returns_the_module_speaking_the_api() -> None:
    assert provider("openai").VENDOR == provider("openai-chat").VENDOR == "openai"
    assert provider("anthropic").VENDOR == "anthropic"
    assert "thinking_budget" in provider("anthropic").OPTIONS
    with pytest.raises(InvalidModelRef):
        provider("gemini")


# -- keys ------------------------------------------------------------------------------------
def test_keys_come_from_a_named_variable_a_callback_or_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-default")
    monkeypatch.setenv("MY_KEY", "from-named")
    assert resolve_key("openai") == "from-default"
    assert resolve_key("openai", "MY_KEY") == "from-named"
    register_key_source("openai", lambda: "from-callback")
    try:
        assert resolve_key("openai") == "from-callback"
        assert resolve_key("openai", "MY_KEY") == "from-named"  # explicit wins
    finally:
        unregister_key_source("openai")


def test_no_key_is_missing_key_naming_where_not_what(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("EMPTY_KEY", "  ")
    for args in [("anthropic",), ("anthropic", "EMPTY_KEY")]:
        with pytest.raises(BackendError) as caught:
            resolve_key(*args)
        assert (caught.value.kind, caught.value.retryable) == ("missing_key", False)
    assert "EMPTY_KEY" in caught.value.message

    def broken() -> str:
        raise RuntimeError(SECRET)

    register_key_source("anthropic", broken)
    try:
        with pytest.raises(BackendError) as caught:
            resolve_key("anthropic")
    finally:
        unregister_key_source("anthropic")
    assert caught.value.kind == "missing_key" and SECRET not in caught.value.message
    assert caught.value.__context__ is None and caught.value.__cause__ is None


# -- errors ----------------------------------------------------------------------------------
def test_retry_after_reads_milliseconds_seconds_and_dates() -> None:
    assert errors.retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert errors.retry_after({"retry-after": "2"}) == 2.0
    assert errors.retry_after({"retry-after": "soon"}) is None
    assert errors.retry_after({}) is None and errors.retry_after(None) is None
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    wait = errors.retry_after({"retry-after": date})
    assert wait is not None and 25 <= wait <= 31


def test_scrub_removes_the_key_and_key_shaped_tokens() -> None:
    text = f"bad key {SECRET}; Authorization: Bearer abc.def; other sk-proj-abcdefgh12"
    clean = errors.scrub(text, SECRET)
    assert SECRET not in clean and "abc.def" not in clean and "sk-proj" not in clean
    assert clean.startswith("bad key [redacted]")
    assert len(errors.scrub("x" * 5000)) == 2000


@pytest.mark.parametrize(("payload", "kind", "retryable"), [
    ({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
     "server_error", True),
    ({"error": {"type": "rate_limit_error"}}, "rate_limited", True),
    ({"code": "rate_limit_exceeded"}, "rate_limited", True),
    ({"code": "invalid_prompt"}, "invalid_request", False),
    ({"type": "authentication_error"}, "authentication", False),
    ({"type": "something_new"}, "provider_error", False),
    ("not a dict", "provider_error", False)])
def test_error_payloads_classify_by_type_or_code(payload: object, kind: str,
                                                 retryable: bool) -> None:
    err = errors.from_payload("anthropic", payload)
    assert (err.kind, err.retryable) == (kind, retryable)


def test_exceptions_classify_by_their_sdk_class_names() -> None:
    class APIConnectionError(Exception):
        pass

    class APIError(Exception):
        body = {"code": "server_error"}

    assert errors.from_exception("openai", APIConnectionError(), key=None).kind == "transport"
    assert errors.from_exception("openai", ConnectionRefusedError(), key=None).kind == "transport"
    assert errors.from_exception("openai", APIError(), key=None).kind == "server_error"
    assert errors.from_exception("openai", ValueError("x"), key=None).kind == "malformed_stream"
    odd = errors.from_exception("openai", RuntimeError(SECRET), key=SECRET)
    assert (odd.kind, odd.retryable) == ("provider_error", False) and SECRET not in odd.message


def test_tool_names_map_to_the_wire_and_back() -> None:
    schema = {"type": "object", "properties": {}}
    names = ToolNames([ToolDecl("fs.read_file", "", schema), ToolDecl("kb-search", "", schema)])
    assert names.wire("fs.read_file") == "fs_read_file"
    assert names.name("fs_read_file") == "fs.read_file" and names.name("other") == "other"
    for tools in ([ToolDecl("a.b", "", schema), ToolDecl("a_b", "", schema)],
                  [ToolDecl("t", "", {"type": "string"})], [ToolDecl("", "", schema)]):
        with pytest.raises(ValueError):
            ToolNames(tools)


def test_importing_hypha_loads_no_sdk() -> None:
    code = ("import sys, hypha_celery, hypha_celery.backends, hypha_celery.backends.llm; "
            "print(sorted(m for m in ('openai', 'anthropic', 'httpx2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_forked_child_builds_its_own_sdk_clients() -> None:
    from hypha_celery.backends.llm.sdk import ClientCache

    cache = ClientCache(lambda key, url, timeout: object())
    parent = cache.get("k", None, 1.0)
    assert cache.get("k", None, 1.0) is parent
    with warnings.catch_warnings():  # 3.12+ warns about forking a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: exit code 0 when it got a new client
        os._exit(0 if cache.get("k", None, 1.0) is not parent else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_clients_are_built_once_per_shard_when_many_threads_ask_at_once() -> None:
    import threading

    from hypha_celery.backends.llm.sdk import SHARDS, ClientCache

    built: list[object] = []

    def factory(key: str, url: str | None, timeout: float) -> object:
        time.sleep(0.01)  # a slow build: every thread arrives while it runs
        built.append(object())
        return built[-1]

    cache = ClientCache(factory)
    got: list[tuple[object, object]] = []

    def twice() -> None:  # a thread keeps its client (and so its connections)
        got.append((cache.get("k", None, 1.0), cache.get("k", None, 1.0)))

    threads = [threading.Thread(target=twice) for _ in range(4 * SHARDS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == SHARDS and all(a is b for a, b in got)
    shares = [sum(1 for a, _ in got if a is c) for c in built]
    assert shares == [4] * SHARDS  # threads spread evenly over the pools


class _Raw:
    """An SDK stream stand-in for the stream's own bookkeeping (no provider involved)."""

    def __init__(self) -> None:
        self.closed = False

    def __iter__(self) -> _Raw:
        return self

    def __next__(self) -> object:
        from billiard.exceptions import SoftTimeLimitExceeded

        raise SoftTimeLimitExceeded()

    def close(self) -> None:
        self.closed = True

    def feed(self, raw: object) -> list[object]:  # never reached: the read raises first
        raise AssertionError("fed")


def test_a_soft_time_limit_passes_through_a_stream_and_closes_it() -> None:
    from billiard.exceptions import SoftTimeLimitExceeded

    from hypha_celery.backends.llm.stream import LLMStream

    raw = _Raw()
    stream = LLMStream("openai", raw, decoder=_Raw(), key=None)  # type: ignore[arg-type]
    with pytest.raises(SoftTimeLimitExceeded):
        next(stream)
    assert raw.closed and stream.closed


# -- server-sent events ----------------------------------------------------------------------
def test_sse_events_join_their_data_lines_and_skip_everything_else() -> None:
    from hypha_celery.backends.llm.sse import parse

    lines = [": a comment", "event: one", "id: 7", "retry: 100", 'data: {"a":', 'data: 1}', "",
             "", 'data:{"type":"x","n":{"m":null}}', "", 'data: {"last": true}']
    events = list(parse(iter(lines)))
    assert events == [{"a": 1}, {"type": "x", "n": {"m": None}}, {"last": True}]
    assert events[1].type == "x" and events[1].n.m is None and events[1].absent is None


def test_sse_done_ends_the_stream_and_bad_json_raises() -> None:
    from hypha_celery.backends.llm.sse import parse

    assert list(parse(iter(['data: {"a": 1}', "", "data: [DONE]", "", 'data: {"b": 2}', ""]))
                ) == [{"a": 1}]
    with pytest.raises(ValueError):
        list(parse(iter(["data: {not json", ""])))
