"""Waiting on a condition in a test, never with a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 15.0, what: str = "",
               log: Callable[[], str] | None = None) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; an
    ``AssertionError`` after ``timeout`` seconds (with ``log()``'s text, say a worker's
    output, when given)."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            tail = f"\n--- log ---\n{log()}" if log else ""
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what or predicate}{tail}")
        time.sleep(0.01)
