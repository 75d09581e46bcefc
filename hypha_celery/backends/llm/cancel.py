"""Cancelling a model call blocked on the network, from another thread.

The SDK clients hypha builds (``openai``, ``anthropic``) send their requests through an
HTTP transport whose network streams are ours (:func:`transport`). A thread that holds a
:class:`CancelToken` (``with token.held():``) registers, for each read or write on the
network, the stream it is using with that token; :meth:`CancelToken.cancel`, from any
other thread, shuts that stream's socket down, so a read waiting for the response's
headers or for the next chunk of its body returns at once and the SDK raises a
connection error. A read, write or connect that starts after the cancel fails at once,
and a wait for a rate limit's room or slot (:func:`pause`) ends.

This is what lets a turn's stream run on the turn's own thread (see
``Backend.cancel_unblocks``): a watchdog or an interrupt reaches a call blocked on the
provider the way it reaches one that is streaming. A request sent through a proxy taken
from the environment (``HTTPS_PROXY``) uses the proxy's own transport, which is not ours:
a cancel reaches it once its response has started (the stream is closed then).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any, TypeVar

__all__ = ["KEEPALIVE_EXPIRY_S", "MAX_CONNECTIONS", "MAX_KEEPALIVE_CONNECTIONS",
           "SOCKET_OPTIONS", "CancelToken", "closing", "pause", "requested", "transport"]

#: The connection bounds of each SDK client's pool (the SDKs' own defaults): at most
#: 1,000 connections, 100 of them kept open between calls, for 5 s.
MAX_CONNECTIONS, MAX_KEEPALIVE_CONNECTIONS, KEEPALIVE_EXPIRY_S = 1000, 100, 5.0
#: TCP keepalive on every connection, as the ``anthropic`` SDK's own transport sets it: a
#: connection the network dropped is noticed within about 6 minutes, not never.
SOCKET_OPTIONS = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
                  *((socket.IPPROTO_TCP, getattr(socket, name), value)
                    for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 60),
                                        ("TCP_KEEPCNT", 5)) if hasattr(socket, name))]

_T = TypeVar("_T")
_local = threading.local()  # .token: the CancelToken the running thread holds


class CancelToken:
    """Cancels what the thread holding it does on the network (see the module)."""

    __slots__ = ("_cancelled", "_event", "_lock", "_stream")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._event = threading.Event()  # set on cancel: ends a pause at once
        self._stream: _Stream | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def held(self) -> _Held:
        """A context manager: this thread's network I/O answers to this token."""
        return _Held(self)

    def cancel(self) -> None:
        """Shut down the stream in use now (if any); later I/O fails at once. Idempotent;
        never raises."""
        with self._lock:
            self._cancelled = True
            stream = self._stream
        self._event.set()
        if stream is not None:
            _shut_down(stream)

    def _enter(self, stream: _Stream, error: str) -> None:
        with self._lock:
            if self._cancelled:
                raise _error(error)
            self._stream = stream

    def _leave(self) -> None:
        with self._lock:
            self._stream = None


class _Held:
    __slots__ = ("_previous", "_token")

    def __init__(self, token: CancelToken) -> None:
        self._token = token
        self._previous: CancelToken | None = None

    def __enter__(self) -> None:
        self._previous = _current()
        _local.token = self._token

    def __exit__(self, *_: object) -> None:
        _local.token = self._previous


def _error(name: str) -> Exception:
    """httpcore2's ``ReadError``, ``WriteError`` or ``ConnectError`` (the SDK maps them
    to its connection error)."""
    import httpcore2

    error: type[Exception] = getattr(httpcore2, name)
    return error("the call was cancelled")


def _shut_down(stream: _Stream) -> None:
    """Shut the stream's socket down at the TCP level (a TLS socket's own ``shutdown``
    would also drop its TLS state under the reading thread); the reader sees the end."""
    sock = stream.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError):  # closed, or never connected: nothing waits on it
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Stream:
    """An ``httpcore2.NetworkStream`` whose reads and writes answer to the calling
    thread's token."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return bytes(self._io("ReadError", self._inner.read, max_bytes, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._io("WriteError", self._inner.write, buffer, timeout)

    def _io(self, error: str, call: Any, *args: Any) -> Any:
        """``call(*args)``, registered with the calling thread's token (if it holds one):
        a cancel meanwhile shuts this stream down; one before it raises ``error``."""
        token = _current()
        if token is None:
            return call(*args)
        token._enter(self, error)
        try:
            return call(*args)
        finally:
            token._leave()

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> _Stream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend:
    """An ``httpcore2.NetworkBackend``: httpcore2's own sync backend, its streams wrapped
    in :class:`_Stream`."""

    def __init__(self) -> None:
        import httpcore2

        self._inner = httpcore2.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> _Stream:
        _refuse_if_cancelled()
        return _Stream(self._inner.connect_tcp(host, port, timeout, local_address,
                                               socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> _Stream:
        _refuse_if_cancelled()
        return _Stream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _current() -> CancelToken | None:
    """The token the calling thread holds, if any."""
    token: CancelToken | None = getattr(_local, "token", None)
    return token


def requested() -> bool:
    """Whether the token this thread holds (if any) was cancelled."""
    token = _current()
    return token is not None and token.cancelled


def pause(seconds: float) -> bool:
    """Sleep ``seconds``, less when the token this thread holds is cancelled (a wait for
    a rate limit); True when it was."""
    token = _current()
    if token is None:
        time.sleep(seconds)
        return False
    return token._event.wait(seconds)


def _refuse_if_cancelled() -> None:
    if requested():
        raise _error("ConnectError")


def closing(client: _T, http: Any) -> _T:
    """``client`` (an SDK client given ``http``, its HTTP client): ``http`` is closed with
    its connections once ``client`` is collected, or at exit (the SDK closes only an HTTP
    client it built itself)."""
    weakref.finalize(client, http.close)
    return client


def transport() -> Any:
    """An ``httpx2.HTTPTransport`` (TLS verified, :data:`MAX_CONNECTIONS` and the keepalive
    bounds, :data:`SOCKET_OPTIONS`) whose network I/O a
    :class:`CancelToken` can cancel."""
    import httpx2

    from hypha_celery._private_api import use_network_backend

    limits = httpx2.Limits(max_connections=MAX_CONNECTIONS,
                           max_keepalive_connections=MAX_KEEPALIVE_CONNECTIONS,
                           keepalive_expiry=KEEPALIVE_EXPIRY_S)
    made = httpx2.HTTPTransport(limits=limits, socket_options=SOCKET_OPTIONS)
    use_network_backend(made, _Backend())
    return made
