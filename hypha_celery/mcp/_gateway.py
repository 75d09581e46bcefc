"""``McpGateway``: MCP servers' tools as governed tools.

A gateway holds server profiles and the store of their baselines. Per process it keeps
one :class:`~hypha_celery.mcp._connection.Connection` per server (opened on first use,
reused by every task of the process, opened again after the server died; forgotten in a
forked child) and the last discovery of each server. :meth:`McpGateway.registry` is a
:class:`~hypha_celery.tools.ToolRegistry` of the callable (approved) tools: a
``GovernedRunner``, ``run_governed``, a ReAct graph or ``ctx.llm`` take it as they take
local tools, so an MCP call goes through scope, policy, review, side-effect levels and
the output schema exactly as a local one.

A call's handler (:class:`McpHandler`) records ``mcp.call.started`` / ``completed`` /
``failed`` (when given a recorder: :func:`recording` gives a registry's MCP handlers the
recorder of the run or the agent turn that calls them), counts the call in the
Prometheus metrics of the process (:func:`hypha_celery.metrics.observe_mcp_call`) and
raises typed errors (:class:`~hypha_celery.errors.McpError`): the server
unreachable or gone (``McpUnavailable``, transient), past ``call_timeout``
(``McpTimeout``), for a ``write`` / ``external_effect`` / ``irreversible`` tool either
of those as ``McpOutcomeUnknown`` (it may have happened: never retried), the tool's own
``isError`` (``McpToolError``), a result past ``max_result_bytes``
(``McpResultTooLarge``). The output is the result's ``structuredContent`` when the server
gave one (what its ``outputSchema`` describes: the runner checks it), else
``{"content": [...]}`` (the content blocks as JSON).

:meth:`McpGateway.read_resource` and :meth:`McpGateway.get_prompt` read a server's
resources and prompts over the same connection (:mod:`hypha_celery.mcp._content`),
bounded by the same ``max_result_bytes``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hypha_celery.errors import (
    CapabilityQuarantined,
    McpError,
    McpOutcomeUnknown,
    McpProfileError,
    McpResultTooLarge,
    McpTimeout,
    McpToolError,
    McpUnavailable,
)
from hypha_celery.events import payloads as ev
from hypha_celery.events.payloads import trusted
from hypha_celery.graph.model import AT_MOST_ONCE
from hypha_celery.jsontypes import JsonValue
from hypha_celery.mcp._connection import Connection
from hypha_celery.mcp._content import Prompt, Resource, get_prompt, read_resource
from hypha_celery.mcp._discovery import Discovery, ToolState, judge, list_all
from hypha_celery.mcp._profile import McpServer
from hypha_celery.metrics import McpCallStatus, declare_mcp_tools, observe_mcp_call
from hypha_celery.middleware import on_fork
from hypha_celery.store import BaselineRow, EventStore
from hypha_celery.tools import Recorder, ToolRegistry, ToolSpec

if TYPE_CHECKING:
    from mcp import ClientSession, types

__all__ = ["McpGateway", "McpHandler", "accept", "recording"]

#: Side-effect levels whose lost call may have happened (never retried).
_EFFECTS = frozenset({"write", *AT_MOST_ONCE})

_started = trusted(ev.McpCallStarted)
_completed = trusted(ev.McpCallCompleted)
_failed = trusted(ev.McpCallFailed)


class McpGateway:
    """``servers`` (profiles, ids unique) over ``store`` (their baselines).
    ``record``: where discovery's events go when :meth:`discover` is not given a
    recorder (None: the baselines table only)."""

    def __init__(self, servers: Iterable[McpServer], store: EventStore, *,
                 record: Recorder | None = None) -> None:
        self.servers: dict[str, McpServer] = {}
        for server in servers:
            if server.id in self.servers:
                raise McpProfileError(f"mcp server {server.id!r} is declared twice")
            self.servers[server.id] = server
        self.store = store
        self.record = record
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}
        self._discoveries: dict[str, Discovery] = {}
        #: The connection's ``tools_changed`` count each discovery saw.
        self._seen: dict[str, int] = {}
        on_fork(self._forget)

    # -- servers and connections --------------------------------------------------------
    def server(self, server_id: str) -> McpServer:
        try:
            return self.servers[server_id]
        except KeyError:
            raise McpProfileError(f"no mcp server {server_id!r} (declared: "
                                  f"{sorted(self.servers)})") from None

    def connection(self, server_id: str) -> Connection:
        """This process's connection to the server (made on first use)."""
        with self._lock:
            conn = self._connections.get(server_id)
            if conn is None or conn.pid != os.getpid():
                conn = self._connections[server_id] = Connection(self.server(server_id))
            return conn

    def close(self) -> None:
        """Close every connection of this process (stdio servers are terminated)."""
        with self._lock:
            conns, self._connections = list(self._connections.values()), {}
        for conn in conns:
            conn.close()

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._connections, self._discoveries, self._seen = {}, {}, {}

    # -- discovery ----------------------------------------------------------------------
    def discover(self, server_id: str, *, record: Recorder | None = None) -> Discovery:
        """List the server's tools, resources and prompts and judge each tool against
        its baseline (:mod:`hypha_celery.mcp._discovery`), recording with ``record``
        (a node's ``ctx.record``: the run's log) or the gateway's. Raises
        :class:`McpUnavailable` / :class:`McpTimeout` when the server cannot answer."""
        server = self.server(server_id)
        conn = self.connection(server_id)
        seen = conn.tools_changed
        listing = conn.request(lambda s: list_all(s, server))
        found = judge(server, listing, self.store, self._recorder(record))
        declare_mcp_tools(server_id, (spec.id for spec in found.callable()))
        with self._lock:
            self._discoveries[server_id] = found
            self._seen[server_id] = seen
        return found

    def _recorder(self, record: Recorder | None) -> Recorder | None:
        return record if record is not None else self.record

    def discovery(self, server_id: str) -> Discovery:
        """The process's last discovery of the server: discovering it if none, or if the
        server said its tools changed since (``notifications/tools/list_changed``)."""
        found = self._discoveries.get(server_id)
        conn = self._connections.get(server_id)
        changed = conn is not None and conn.tools_changed != self._seen.get(server_id)
        return found if found is not None and not changed else self.discover(server_id)

    def accept(self, server_id: str, tool: str, by: str | None, *,
               capability_hash: str | None = None,
               record: Recorder | None = None) -> BaselineRow:
        """Approve the tool's contract last discovered (see :func:`accept`); the
        process's discovery is refreshed on next use."""
        row = accept(self.store, self.server(server_id).id, tool, by,
                     capability_hash=capability_hash, record=self._recorder(record))
        with self._lock:
            self._discoveries.pop(server_id, None)
        return row

    # -- tools --------------------------------------------------------------------------
    def specs(self, servers: Iterable[str] | None = None) -> list[ToolSpec]:
        """The callable tools' specs (what a model is shown)."""
        return self.registry(servers).specs()

    def registry(self, servers: Iterable[str] | None = None, *,
                 record: Recorder | None = None,
                 failures: list[McpError] | None = None) -> ToolRegistry:
        """The callable tools of ``servers`` (default: all), discovered on first use.
        Their handlers record ``mcp.call.*`` with ``record`` and append the typed
        error of a failed call to ``failures`` (what :func:`call_mcp` re-raises)."""
        registry = ToolRegistry()
        for server_id in servers if servers is not None else self.servers:
            for spec in self.discovery(server_id).callable():
                registry.register(spec, self.handler(spec, record, failures))
        return registry

    def spec(self, tool_id: str) -> ToolSpec:
        """A callable tool's spec; :class:`CapabilityQuarantined` for a quarantined or
        invalid one, :class:`McpProfileError` for an unknown server or tool."""
        server_id, _, name = tool_id.partition(".")
        found = self.discovery(server_id)
        tool = next((t for t in found.tools if t.name == name), None)
        if tool is None or tool.state is ToolState.NOT_ALLOWED:
            raise McpProfileError(f"mcp server {server_id!r} has no tool {name!r}"
                                  + (" it allows" if tool is not None else ""))
        if tool.spec is None:
            raise CapabilityQuarantined(server_id, f"tool {name!r} is {tool.state.value}"
                                        + (f": {tool.problem}" if tool.problem else
                                           ": an operator must accept it (hypha mcp accept)"))
        return tool.spec

    def handler(self, spec: ToolSpec, record: Recorder | None = None,
                failures: list[McpError] | None = None) -> McpHandler:
        """The function that calls ``spec``'s tool on its server."""
        return McpHandler(self.connection(spec.id.partition(".")[0]), spec, record, failures)

    # -- resources and prompts ----------------------------------------------------------
    def read_resource(self, server_id: str, uri: str) -> Resource:
        """``resources/read`` of ``uri`` on the server, over its connection: the contents
        (text, or base64 ``blob``). Past the profile's ``max_result_bytes`` (the JSON of
        the contents) :class:`McpResultTooLarge`; an unknown resource (the server's
        JSON-RPC error) :class:`McpToolError`; :class:`McpUnavailable` /
        :class:`McpTimeout` as for a call."""
        server = self.server(server_id)
        return self.connection(server_id).request(
            lambda session: read_resource(session, server, uri))

    def get_prompt(self, server_id: str, name: str,
                   arguments: Mapping[str, str] | None = None) -> Prompt:
        """``prompts/get`` of ``name`` with ``arguments`` on the server: its messages.
        Bounded and failing as :meth:`read_resource`."""
        server = self.server(server_id)
        args = dict(arguments or {})
        return self.connection(server_id).request(
            lambda session: get_prompt(session, server, name, args))


@dataclass(frozen=True, eq=False)
class McpHandler:
    """The handler of one MCP tool (a ``ToolRegistry`` handler: ``handler(args)``): calls
    ``spec``'s tool over ``conn``, records ``mcp.call.*`` with ``record`` (None: not
    recorded) and appends a failed call's typed error to ``failures``."""

    conn: Connection
    spec: ToolSpec
    record: Recorder | None = None
    failures: list[McpError] | None = field(default=None, repr=False)

    def __call__(self, args: Any) -> JsonValue:
        try:
            return _call(self.conn, self.spec, self.spec.id.partition(".")[2], args,
                         self.record)
        except McpError as exc:
            if self.failures is not None:
                self.failures.append(exc)
            raise

    def recording(self, record: Recorder | None) -> McpHandler:
        """The same handler, recording with ``record``."""
        return replace(self, record=record)


def recording(registry: ToolRegistry, record: Recorder | None) -> ToolRegistry:
    """``registry``'s tools, its MCP handlers (:class:`McpHandler`) recording
    ``mcp.call.*`` with ``record`` (a node's ``ctx.record``, an agent turn's recorder);
    the other tools as they are. What ReAct's ``act`` and ``AgentTools`` call tools
    through."""
    rebound = ToolRegistry()
    for tool_id in registry:
        tool = registry.resolve(tool_id)
        handler = tool.handler
        rebound.register(tool.spec, handler.recording(record)
                         if isinstance(handler, McpHandler) else handler)
    return rebound


def accept(store: EventStore, server_id: str, tool: str, by: str | None, *,
           capability_hash: str | None = None,
           record: Recorder | None = None) -> BaselineRow:
    """An operator approves ``server_id``'s ``tool`` as last discovered (only if its hash
    is still ``capability_hash``, when given): callable from the next discovery on.
    ``mcp.capability.approved`` goes to ``record``; the baseline keeps who and when.
    :class:`McpProfileError` when there is no such tool (or it changed since)."""
    row = store.approve_mcp_capability(server_id, tool, by, capability_hash=capability_hash)
    if row is None:
        raise McpProfileError(
            f"mcp server {server_id!r} has no discovered tool {tool!r}"
            + (f" with hash {capability_hash}" if capability_hash else ""))
    if record is not None:
        event = ev.McpCapabilityApproved(server=server_id, capability=tool,
                                         capability_hash=row.capability_hash, approved_by=by)
        record(event.kind, event.dump())
    return row


def _call(conn: Connection, spec: ToolSpec, name: str, args: Any,
          record: Recorder | None) -> JsonValue:
    server = conn.server
    ids = {"server": server.id, "capability": name, "tool": spec.id}
    if record is not None:
        record("mcp.call.started",
               _started(**ids, transport=server.transport.kind).dump())
    began = time.perf_counter()
    try:
        result = conn.request(lambda session: _call_tool(session, name, args))
        output, size = _output(server, name, result)
    except McpError as exc:
        error = _outcome(exc, spec)
        observe_mcp_call(server.id, spec.id, _status(error), time.perf_counter() - began)
        if record is not None:
            record("mcp.call.failed", _failed(
                **ids, error_class=error.error_class, error_type=type(error).__name__,
                message=str(error)[:500], latency_ms=_ms(began),
                outcome_unknown=isinstance(error, McpOutcomeUnknown)).dump())
        if error is exc:
            raise
        raise error from exc
    observe_mcp_call(server.id, spec.id, McpCallStatus.COMPLETED, time.perf_counter() - began)
    if record is not None:
        record("mcp.call.completed",
               _completed(**ids, latency_ms=_ms(began), result_bytes=size).dump())
    return output


def _status(error: McpError) -> McpCallStatus:
    """A failed call's ``status`` label."""
    if isinstance(error, McpOutcomeUnknown):
        return McpCallStatus.OUTCOME_UNKNOWN
    if isinstance(error, McpTimeout):
        return McpCallStatus.TIMEOUT
    if isinstance(error, McpUnavailable):
        return McpCallStatus.UNAVAILABLE
    if isinstance(error, McpResultTooLarge):
        return McpCallStatus.TOO_LARGE
    return McpCallStatus.FAILED


async def _call_tool(session: ClientSession, name: str, args: Any) -> types.CallToolResult:
    """``tools/call`` as one request: the SDK's ``call_tool`` also checks the output
    schema (raising a bare ``RuntimeError``) and lists the tools again for a name it has
    not seen; here the governed runner checks the output, as for a local tool."""
    from mcp import types

    request = types.ClientRequest(types.CallToolRequest(
        params=types.CallToolRequestParams(name=name, arguments=args)))
    return await session.send_request(request, types.CallToolResult)


def _output(server: McpServer, name: str, result: types.CallToolResult
            ) -> tuple[JsonValue, int]:
    if result.isError:
        text = " ".join(getattr(block, "text", "") for block in result.content)
        raise McpToolError(server.id, f"tool {name!r} failed: {text[:300]}")
    output: Any = result.structuredContent if result.structuredContent is not None else {
        "content": [block.model_dump(mode="json", exclude_none=True)
                    for block in result.content]}
    size = len(json.dumps(output, separators=(",", ":"), ensure_ascii=False).encode())
    if size > server.max_result_bytes:
        raise McpResultTooLarge(server.id, f"tool {name!r} returned {size} bytes of JSON, "
                                f"more than max_result_bytes={server.max_result_bytes}")
    return output, size


def _outcome(exc: McpError, spec: ToolSpec) -> McpError:
    """A lost effect call is ``McpOutcomeUnknown`` (it may have happened)."""
    lost = isinstance(exc, McpTimeout) or (isinstance(exc, McpUnavailable) and exc.sent)
    if lost and spec.side_effect in _EFFECTS:
        return McpOutcomeUnknown(exc.server, f"{spec.id} ({spec.side_effect}) was lost "
                                 f"mid-call and may have happened: {exc}")
    return exc


def _ms(began: float) -> float:
    return round((time.perf_counter() - began) * 1000, 3)
