"""``LLMStream``: one streamed model call as an iterator of
:class:`~hypha_celery.backends.BackendEvent`, whatever the provider.

Event kinds: ``text`` ``{"text"}`` (a delta), ``tool_use`` ``{"id", "name", "input"}``
(once per call, with its whole input), ``reasoning`` ``{"chars"}`` (how much the model
thought: never the text) and, last, ``usage`` (:class:`Usage` JSON). :attr:`result` is
set once the provider's terminal event arrived and the response was read to its end.

Iteration raises :class:`~hypha_celery.backends.BackendError` on any failure: an HTTP or
transport error, an error event, a malformed event, a stream that ends before its terminal
event (``incomplete_stream``: the SDKs may end a cut stream silently; it is never a short
answer), or ``cancelled`` after :meth:`LLMStream.close`. The HTTP response is closed in
every case.

:meth:`close` may be called from any thread, any number of times. Closing an SDK stream
does not wake a thread blocked reading its socket (Linux keeps the connection open until
that read returns), so ``close`` shuts the socket down first: the reader gets EOF at once
and the server sees the disconnect.
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import suppress
from types import TracebackType
from typing import Any, Protocol

from hypha_celery.backends.error import BackendError
from hypha_celery.backends.event import BackendEvent
from hypha_celery.backends.llm import errors
from hypha_celery.backends.llm.types import LLMResult

__all__ = ["Decoder", "LLMStream"]


class Decoder(Protocol):
    """Turns one provider's raw stream events into :class:`BackendEvent` s and an
    :class:`LLMResult`."""

    def feed(self, raw: Any) -> list[BackendEvent]:
        """Events for one raw SDK event; raises ``BackendError`` for an error event."""

    def finish(self) -> tuple[list[BackendEvent], LLMResult]:
        """At the end of the stream: the last events (``usage``) and the result; raises
        ``BackendError(kind="incomplete_stream")`` when the terminal event never came."""


class LLMStream(Iterator[BackendEvent]):
    """A live model call (see the module docstring). Use it as a context manager or call
    :meth:`close` when you stop early: a plain ``break`` leaves the connection open."""

    result: LLMResult | None

    def __init__(self, vendor: str, sdk_stream: Any, decoder: Decoder, *,
                 key: str | None) -> None:
        self.vendor = vendor
        self.result = None
        self._sdk = sdk_stream
        self._raw: Iterator[Any] = iter(sdk_stream)
        self._decoder = decoder
        self._feed = decoder.feed
        self._key = key  # only to scrub it from error text
        self._pending: deque[BackendEvent] = deque()
        self._lock = threading.Lock()
        self._closed = False
        self._finished = False

    def __iter__(self) -> LLMStream:
        return self

    def __next__(self) -> BackendEvent:
        pending = self._pending
        while not pending:
            if self._finished:
                raise StopIteration
            events = self._pull()
            if len(events) == 1:  # the usual case (one delta): no queueing
                return events[0]
            pending.extend(events)
        return pending.popleft()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the HTTP response (thread-safe, idempotent); a reader blocked in another
        thread then raises ``BackendError(kind="cancelled")``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not self._finished:  # the connection is still this response's own
                _shutdown(self._sdk)
        with suppress(Exception):
            self._sdk.close()

    def __enter__(self) -> LLMStream:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------
    # Errors are raised outside ``except`` blocks: an SDK exception may quote a key a
    # server echoed, so it must not ride along as ``__context__``.
    def _pull(self) -> list[BackendEvent]:
        error: BackendError | None = None
        try:
            return self._feed(next(self._raw))
        except StopIteration:
            return self._end()
        except errors.PASSTHROUGH:
            self.close()
            raise
        except Exception as exc:  # the SDK's read or the decoder
            error = self._failure(exc)
        raise error

    def _end(self) -> list[BackendEvent]:
        self._release()
        if self._closed:
            raise errors.cancelled(self.vendor)
        error: BackendError | None = None
        try:
            events, result = self._decoder.finish()
        except errors.PASSTHROUGH:
            raise
        except Exception as exc:
            error = errors.from_exception(self.vendor, exc, key=self._key)
        if error is not None:
            raise error
        self.result = result
        return events

    def _failure(self, exc: Exception) -> BackendError:
        self._release()
        if self._closed:
            return errors.cancelled(self.vendor)
        if _cut(exc):
            return errors.incomplete_stream(self.vendor, "the connection closed mid-stream")
        return errors.from_exception(self.vendor, exc, key=self._key)

    def _release(self) -> None:
        with self._lock:
            self._finished = True
        with suppress(Exception):
            self._sdk.close()


def _cut(exc: BaseException) -> bool:
    """The peer closed the connection before the body ended (an incomplete chunked read),
    raised as is (Anthropic) or wrapped in a connection error (OpenAI)."""
    seen: BaseException | None = exc
    for _ in range(3):
        if seen is None:
            return False
        if any(c.__name__ == "RemoteProtocolError" for c in type(seen).__mro__):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _shutdown(sdk_stream: Any) -> None:
    """Shut the stream's socket down (wakes a blocked reader); best effort."""
    response = getattr(sdk_stream, "response", None)
    extensions = getattr(response, "extensions", None) or {}
    network = extensions.get("network_stream")
    sock = network.get_extra_info("socket") if network is not None else None
    if isinstance(sock, socket.socket):
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
