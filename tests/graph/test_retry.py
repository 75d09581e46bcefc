"""Error classes, retry decisions and deterministic backoff (pure logic)."""

from __future__ import annotations

from typing import Any

import pytest

from hypha_celery import GraphSpecError, Node, RetryPolicy, classify
from hypha_celery.graph.retry import fnv1a


class RateLimitError(Exception):
    pass


class ReadTimeout(Exception):
    pass


class HTTPError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class Declared(Exception):
    error_class = "rate_limit"


class PolicyDenied(Exception):
    pass


@pytest.mark.parametrize(("exc", "expected"), [
    (ConnectionError("refused"), "transient"),
    (OSError("reset"), "transient"),
    (TimeoutError(), "timeout"),
    (ReadTimeout(), "timeout"),
    (RateLimitError(), "rate_limit"),
    (HTTPError(429), "rate_limit"),
    (HTTPError(503), "transient"),
    (HTTPError(422), "validation"),
    (HTTPError(403), "policy"),
    (PolicyDenied(), "policy"),
    (PermissionError(), "policy"),
    (ValueError("bad"), "validation"),
    (KeyError("k"), "validation"),
    (Declared(), "rate_limit"),
    (RuntimeError("?"), "unknown"),
])
def test_classify(exc: BaseException, expected: str) -> None:
    assert classify(exc) == expected


def test_only_retryable_classes_retry_within_max_attempts() -> None:
    p = RetryPolicy(max_attempts=3)
    assert p.retries("transient", 1) and p.retries("timeout", 2)
    assert not p.retries("transient", 3)  # the third attempt was the last
    assert not p.retries("validation", 1) and not p.retries("unknown", 1)
    assert RetryPolicy(retry_on=("unknown",)).retries("unknown", 1)


def test_delays_are_exponential_capped_and_deterministic() -> None:
    p = RetryPolicy(backoff=1.0, max_backoff=5.0, jitter=0.2)
    delays = [p.delay("run.3", n) for n in range(1, 6)]
    assert delays == [p.delay("run.3", n) for n in range(1, 6)]  # same input, same delay
    for n, d in enumerate(delays, start=1):
        base = min(5.0, 2.0 ** (n - 1))
        assert base * 0.8 - 1e-9 <= d <= min(5.0, base * 1.2) + 1e-9
    assert delays[-1] <= 5.0
    assert p.delay("run.3", 1) != p.delay("run.4", 1)  # jitter differs per execution
    assert RetryPolicy(backoff=1.0, jitter=0.0).delay("x", 3) == 4.0


def test_fnv1a_matches_the_reference() -> None:
    assert fnv1a("") == 0x811C9DC5
    assert fnv1a("a") == 0xE40C292C


@pytest.mark.parametrize("kwargs", [
    {"max_attempts": 0}, {"backoff": -1}, {"backoff": 5, "max_backoff": 1}, {"jitter": 2},
    {"retry_on": ("transient", "sometimes")},
])
def test_invalid_policies_fail_at_definition_time(kwargs: dict[str, Any]) -> None:
    with pytest.raises(GraphSpecError):
        RetryPolicy(**kwargs)


def test_node_options_are_checked() -> None:
    def fn(s: Any, i: Any) -> dict[str, Any]:
        return {}

    with pytest.raises(GraphSpecError):
        Node(fn, side_effect="sometimes")  # type: ignore[arg-type]
    with pytest.raises(GraphSpecError):
        Node(fn, receipt=lambda s, i, c: None)  # a receipt needs an at-most-once node
    with pytest.raises(GraphSpecError):
        Node(fn, retry=3)  # type: ignore[arg-type]
    assert Node(fn, side_effect="irreversible").at_most_once
    assert not Node(fn, side_effect="write").at_most_once
    assert Node(lambda s, i, ctx: {}).takes_ctx and not Node(fn).takes_ctx
