"""``Connection``: one process's session with one MCP server, opened on first use, reused
by every call of the process, and opened again after the server died or hung.

The SDK's transports and ``ClientSession`` are async context managers entered and left
by one task: :meth:`Connection._own` is that task, on the process's MCP loop
(:mod:`hypha_celery.mcp._loop`); requests run as other tasks on the same loop. A
failure of the transport (the server exited, a connection refused, a call past its
timeout) closes the session (the owner task leaves its contexts: a stdio server process
is terminated) and the next request opens a new one.
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, TypeVar

from hypha_celery.errors import McpTimeout, McpToolError, McpUnavailable
from hypha_celery.mcp import _loop
from hypha_celery.mcp._profile import HttpTransport, McpServer, StdioTransport
from hypha_celery.mcp._sdk import require

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["Connection", "is_closed_error"]

T = TypeVar("T")
#: Extra seconds the caller's thread waits past a call's own timeout (the loop's answer).
_GRACE = 5.0


def is_closed_error(exc: BaseException) -> bool:
    """The SDK's "connection closed" error (the server went away mid-request)."""
    from mcp.shared.exceptions import McpError
    from mcp.types import CONNECTION_CLOSED

    return isinstance(exc, McpError) and exc.error.code == CONNECTION_CLOSED


def _is_sdk_error(exc: BaseException) -> bool:
    from mcp.shared.exceptions import McpError

    return isinstance(exc, McpError)


class Connection:
    """The session with ``server`` of this process (see the module)."""

    def __init__(self, server: McpServer) -> None:
        require()
        self.server = server
        self.pid = os.getpid()
        self.opened = 0  # sessions opened so far (1 while the first lives)
        self._session: ClientSession | None = None
        self._stop: asyncio.Event | None = None
        self._opening: asyncio.Lock | None = None
        self._task: asyncio.Task[None] | None = None
        #: Set when a streamable HTTP connection broke (:func:`_watched`): the SDK does
        #: not fail the requests waiting on it, a request races it.
        self._lost: asyncio.Event | None = None
        #: Sessions' ``notifications/tools/list_changed`` so far: the gateway discovers the
        #: server again when this moved since its last discovery.
        self.tools_changed = 0

    # -- from any thread ----------------------------------------------------------------
    def request(self, call: Callable[[ClientSession], Awaitable[T]],
                timeout: float | None = None) -> T:
        """``call(session)`` on the loop within ``timeout`` (default: the profile's
        ``call_timeout``), after opening the session if need be (within
        ``connect_timeout``). Raises :class:`McpTimeout` past
        it and :class:`McpUnavailable` when the server cannot be reached or went away;
        either closes the session. Other errors (the SDK's protocol errors) propagate."""
        bound = self.server.call_timeout if timeout is None else timeout
        try:
            return _loop.run(self._request(call, bound),
                             self.server.connect_timeout + bound + _GRACE)
        except TimeoutError:
            self.close()
            raise McpTimeout(self.server.id, f"no answer within {bound:g}s") from None

    def close(self) -> None:
        """Close the session (if any); the next request opens another."""
        if self.pid == os.getpid():
            asyncio.run_coroutine_threadsafe(self._close(), _loop.loop())

    # -- on the loop --------------------------------------------------------------------
    async def _request(self, call: Callable[[ClientSession], Awaitable[T]],
                       timeout: float) -> T:
        session = await self._session_or_open()
        lost = self._lost
        try:
            async with asyncio.timeout(timeout):
                if lost is None:
                    return await call(session)
                return await _unless_lost(call(session), lost)
        except TimeoutError:
            await self._close()
            raise
        except Exception as exc:
            if is_closed_error(exc) or isinstance(exc, OSError | EOFError):
                await self._close()
                raise McpUnavailable(self.server.id, f"the server went away ({exc})") from exc
            if _is_sdk_error(exc):  # the server answered with a JSON-RPC error
                raise McpToolError(self.server.id, _first_line(exc)) from exc
            raise

    async def _session_or_open(self) -> ClientSession:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._lost is not None and self._lost.is_set():  # its HTTP stream broke
                await self._close()
            if self._session is None:
                self._session = await self._open()
            return self._session

    async def _open(self) -> ClientSession:
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        self._stop = stop
        task = self._task = asyncio.create_task(self._own(ready, stop))  # held: a strong ref
        try:
            async with asyncio.timeout(self.server.connect_timeout):
                session = await asyncio.shield(ready)
        except Exception as exc:
            stop.set()
            task.cancel()
            error = McpUnavailable(self.server.id,
                                   f"cannot open a session: {_first_line(exc)}")
            error.sent = False  # nothing was asked of the server: safe to retry
            raise error from None
        self.opened += 1
        return session

    async def _own(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        """The task that holds the transport and the session open until ``stop``."""
        from mcp import ClientSession

        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                # no read timeout of the SDK's: Connection.request bounds each call
                session = await stack.enter_async_context(ClientSession(
                    read, write, message_handler=self._notified))
                await session.initialize()
                ready.set_result(session)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception)
                                    else RuntimeError(type(exc).__name__))

    async def _notified(self, message: Any) -> None:
        """The session's messages from the server: a changed tool list is counted."""
        from mcp import types

        if isinstance(message, types.ServerNotification) and \
                isinstance(message.root, types.ToolListChangedNotification):
            self.tools_changed += 1

    def _transport(self) -> Any:
        transport = self.server.transport
        if isinstance(transport, StdioTransport):
            from mcp.client.stdio import (
                StdioServerParameters,
                get_default_environment,
                stdio_client,
            )

            env = {**get_default_environment(), **transport.env}
            params = StdioServerParameters(command=transport.command,
                                           args=list(transport.args), env=env,
                                           cwd=transport.cwd)
            return _pair(stdio_client(params, errlog=_devnull()))
        assert isinstance(transport, HttpTransport)
        import httpx
        from mcp.client.streamable_http import streamable_http_client

        lost = self._lost = asyncio.Event()
        client = httpx.AsyncClient(
            headers=transport.headers, timeout=httpx.Timeout(self.server.call_timeout),
            transport=_watched()(lost))
        return _http(streamable_http_client(transport.url, http_client=client), client)

    async def _close(self) -> None:
        session, stop = self._session, self._stop
        self._session = self._stop = self._lost = None
        if stop is not None:
            stop.set()
        del session


async def _unless_lost(call: Awaitable[T], lost: asyncio.Event) -> T:
    """``call``'s result, or :class:`ConnectionError` as soon as ``lost`` is set."""
    task = asyncio.ensure_future(call)
    watch = asyncio.ensure_future(lost.wait())
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if task.done():
        return task.result()
    task.cancel()
    raise ConnectionError("the HTTP connection to the server broke mid-request")


@functools.cache
def _watched() -> Any:
    """The ``httpx`` transport class that sets ``lost`` when a connection to the server
    breaks, while sending a request or reading a response's stream (the SDK reads a
    call's answer in a task of its own and drops that error). A broken or refused
    connection counts, not a timeout (an idle notification stream times out and is
    reopened by the SDK). Made on first use: ``httpx`` comes with the ``mcp`` extra."""
    import httpx

    broken = (httpx.NetworkError, httpx.RemoteProtocolError)

    class WatchedStream(httpx.AsyncByteStream):
        def __init__(self, inner: Any, lost: asyncio.Event) -> None:
            self.inner, self.lost = inner, lost

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self.inner:
                    yield chunk
            except broken:
                self.lost.set()
                raise

        async def aclose(self) -> None:
            await self.inner.aclose()

    class Watched(httpx.AsyncBaseTransport):
        def __init__(self, lost: asyncio.Event) -> None:
            self.inner, self.lost = httpx.AsyncHTTPTransport(), lost

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            try:
                response = await self.inner.handle_async_request(request)
            except broken:
                self.lost.set()
                raise
            response.stream = WatchedStream(response.stream, self.lost)
            return response

        async def aclose(self) -> None:
            await self.inner.aclose()

    return Watched


class _pair:
    """A transport context giving ``(read, write)`` (stdio gives exactly that)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __aenter__(self) -> tuple[Any, Any]:
        streams = await self.inner.__aenter__()
        return streams[0], streams[1]

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self.inner.__aexit__(*exc)  # type: ignore[no-any-return]


class _http(_pair):
    """The streamable HTTP transport, which also closes its own ``httpx`` client."""

    def __init__(self, inner: Any, client: Any) -> None:
        super().__init__(inner)
        self.client = client

    async def __aexit__(self, *exc: object) -> bool | None:
        try:
            return await super().__aexit__(*exc)
        finally:
            await self.client.aclose()


def _devnull() -> Any:
    """Where a stdio server's stderr goes (the worker's logs are not its)."""
    return subprocess.DEVNULL  # anyio's open_process takes a file or a descriptor


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _first_line(exc.exceptions[0])
    return f"{type(exc).__name__}: " + (str(exc).splitlines() or [""])[0][:300]
