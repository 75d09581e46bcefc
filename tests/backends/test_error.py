from __future__ import annotations

import errno
import json
import socket
from typing import Any

import pytest

from hypha_celery.backends import BackendError
from hypha_celery.errors import HyphaError, HyphaRuntimeError

HTTP_TABLE = [
    (429, "rate_limited", True),
    (401, "authentication", False), (403, "authentication", False),
    (400, "invalid_request", False), (404, "invalid_request", False),
    (422, "invalid_request", False),
    (500, "server_error", True), (502, "server_error", True), (503, "server_error", True),
    (599, "server_error", True),
    (408, "http_error", True), (409, "http_error", True), (425, "http_error", True),
    (402, "http_error", False), (418, "http_error", False), (301, "http_error", False),
    (200, "http_error", False),
]


@pytest.mark.parametrize(("status", "kind", "retryable"), HTTP_TABLE)
def test_http_table(status: int, kind: str, retryable: bool) -> None:
    err = BackendError.http("openai", status, {"error": {"message": "m"}}, retry_after="7")
    assert (err.provider, err.kind, err.retryable, err.status) == ("openai", kind, retryable,
                                                                   status)
    assert err.retry_after == "7" and err.message == "m"
    assert err.raw == {"error": {"message": "m"}}


def test_is_a_hypha_runtime_error() -> None:
    err = BackendError("claude", "x", False)
    assert isinstance(err, HyphaRuntimeError) and isinstance(err, HyphaError)


def test_normalize_passes_an_error_through() -> None:
    err = BackendError("codex", "rate_limited", True, 429)
    assert BackendError.normalize("other", err) is err


def test_normalize_http_tuple() -> None:
    err = BackendError.normalize("anthropic", ("http_error", 503, "overloaded"))
    assert (err.provider, err.kind, err.retryable, err.status) == ("anthropic", "server_error",
                                                                   True, 503)
    assert err.raw == "overloaded" and err.message == "overloaded"


@pytest.mark.parametrize(("exc", "retryable"), [
    (TimeoutError("t"), True), (OSError(errno.ETIMEDOUT, "t"), True),
    (OSError(errno.ECONNRESET, "r"), True),
    (ConnectionResetError("reset"), True), (BrokenPipeError("closed"), True),
    (ConnectionAbortedError("closed"), True),
    (ConnectionRefusedError("refused"), False), (OSError("generic"), False),
    (ConnectionError("plain"), False), (socket.gaierror("dns"), False)])
def test_normalize_transport(exc: OSError, retryable: bool) -> None:
    err = BackendError.normalize("openai", exc)
    assert (err.kind, err.retryable, err.status) == ("transport", retryable, None)
    assert err.raw is exc


def test_normalize_kind_tuple_and_anything_else() -> None:
    err = BackendError.normalize("claude", ("cli_not_found", "/usr/bin/claude"))
    assert (err.kind, err.retryable, err.raw) == ("cli_not_found", False, "/usr/bin/claude")
    for value in ("boom", 42, None, {"x": 1}, ValueError("v"), ("a", "b", "c")):
        err = BackendError.normalize("claude", value)
        assert (err.kind, err.retryable) == ("provider_error", False)
        assert err.raw is value


def test_json_is_content_free_and_round_trips() -> None:
    err = BackendError.http("openai", 429, "body", retry_after=3)
    doc = err.to_json()
    assert doc == {"provider": "openai", "kind": "rate_limited", "retryable": True,
                   "status": 429, "retry_after": 3}
    back = BackendError.from_json(json.loads(json.dumps(doc)))
    assert back.to_json() == doc and back.message == "" and back.raw is None


def test_secrets_never_shown() -> None:
    secret = "sk-test-SECRET-SENTINEL"
    errors: list[BackendError] = [
        BackendError("openai", "authentication", False, 401, message=secret,
                     raw={"key": secret}),
        BackendError.http("openai", 401, {"error": {"message": secret}}),
        BackendError.http("openai", 500, secret),
        BackendError.normalize("openai", ("http_error", 400, secret)),
        BackendError.normalize("openai", ("bad", secret)),
        BackendError.normalize("openai", ConnectionResetError(secret)),
        BackendError.normalize("openai", secret),
    ]
    for err in errors:
        assert secret in err.message or secret in repr(err.raw)
        shown: list[Any] = [str(err), repr(err), err.args, json.dumps(err.to_json())]
        assert all("SECRET-SENTINEL" not in str(s) for s in shown), shown
        with pytest.raises(BackendError) as info:
            raise err
        assert "SECRET-SENTINEL" not in info.exconly()


def test_str_and_repr_name_the_classification() -> None:
    err = BackendError.http("anthropic", 429)
    assert str(err) == "anthropic backend error: rate_limited (retryable=True) status=429"
    assert repr(err) == ("BackendError(provider='anthropic', kind='rate_limited', "
                         "retryable=True, status=429)")
