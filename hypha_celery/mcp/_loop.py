"""One asyncio event loop per process, on a daemon thread, for the MCP SDK (which is
async): the gateway's sync callers (a node, a CLI command) hand it coroutines and wait
for their results with a bound. After a fork the child starts its own on first use (the
parent's thread does not exist there; its loop is dropped, never closed from the child).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from hypha_celery.middleware import on_fork

__all__ = ["run"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid: int | None = None


def _start() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    threading.Thread(target=serve, name="hypha-mcp-loop", daemon=True).start()
    ready.wait()
    return loop


def loop() -> asyncio.AbstractEventLoop:
    """This process's loop (started on first use)."""
    global _loop, _pid
    with _lock:
        if _loop is None or _pid != os.getpid():
            _loop, _pid = _start(), os.getpid()
        return _loop


def run(coro: Coroutine[Any, Any, T], timeout: float) -> T:
    """Run ``coro`` on the loop and wait at most ``timeout`` seconds for it (past it the
    coroutine is cancelled and :class:`TimeoutError` raised)."""
    future = asyncio.run_coroutine_threadsafe(coro, loop())
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"no answer within {timeout:g}s") from None


def _forget() -> None:
    global _loop, _pid, _lock
    _loop = _pid = None
    _lock = threading.Lock()  # a parent's thread may have held it at the fork


on_fork(_forget)
