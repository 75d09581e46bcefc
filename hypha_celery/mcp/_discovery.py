"""Discovery: a server's tools (and resources and prompts) listed over its session,
each tool judged against its stored baseline, in hypha's order.

Per tool: ``mcp.capability.discovered`` → ``mcp.capability.trust.evaluated`` → when its
hash is not the approved one, ``mcp.capability.drift.detected`` (``added`` /
``changed``) and, under the drift policy ``quarantine``, ``mcp.capability.quarantined``
(not callable) → else normalized into a ``ToolSpec`` (``mcp.tool.normalized``). A tool
the profile does not allow is skipped (``not_allowed``); a tool whose contract does not
make a ``ToolSpec`` (a malformed JSON Schema, a name that is not one) is ``invalid``,
with the problem, and quarantined: a recorded failure, the other tools go on. A tool of
the baseline the server no longer lists is a drift ``removed``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

from hypha_celery.errors import ToolSpecError
from hypha_celery.events import payloads as ev
from hypha_celery.graph.model import SideEffect
from hypha_celery.mcp._capability import Contract, contract_of, effective_level, tool_spec
from hypha_celery.mcp._profile import DriftPolicy, McpServer
from hypha_celery.store import EventStore
from hypha_celery.tools import Recorder, ToolSpec

if TYPE_CHECKING:
    from mcp import ClientSession, types

__all__ = ["Discovery", "DiscoveredTool", "ToolState", "judge", "list_all"]

Change = Literal["added", "changed"]


class ToolState(StrEnum):
    """What discovery made of a tool."""

    CALLABLE = "callable"
    QUARANTINED = "quarantined"
    INVALID = "invalid"
    NOT_ALLOWED = "not_allowed"


@dataclass(frozen=True, slots=True)
class DiscoveredTool:
    """One tool of a discovery: its state, contract hash, declared and effective
    side-effect levels, the drift (``added`` / ``changed``, None: as approved), its
    ``ToolSpec`` (callable only) and, for an invalid one, the problem."""

    server: str
    name: str
    state: ToolState
    capability_hash: str | None = None
    declared: SideEffect | None = None
    side_effect: SideEffect | None = None
    change: Change | None = None
    spec: ToolSpec | None = None
    problem: str | None = None

    @property
    def tool_id(self) -> str:
        return f"{self.server}.{self.name}"


@dataclass(frozen=True, slots=True)
class Discovery:
    """What one discovery of ``server`` found."""

    server: str
    tools: tuple[DiscoveredTool, ...]
    resources: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def callable(self) -> list[ToolSpec]:
        return [t.spec for t in self.tools if t.spec is not None]

    def of_state(self, state: ToolState) -> list[DiscoveredTool]:
        return [t for t in self.tools if t.state is state]

    def tool(self, name: str) -> DiscoveredTool:
        return next(t for t in self.tools if t.name == name)


@dataclass(frozen=True, slots=True)
class Listing:
    """A server's lists, as the SDK parsed them (bounded by the profile's ``max_tools``)."""

    tools: list[types.Tool]
    resources: list[str]
    prompts: list[str]


async def list_all(session: ClientSession, server: McpServer) -> Listing:
    """Every page of the server's tools (and, when it offers them, resource URIs and
    prompt names), at most ``server.max_tools`` of each."""
    from mcp.types import PaginatedRequestParams

    tools: list[types.Tool] = []
    cursor: str | None = None
    while len(tools) < server.max_tools:
        page = await session.list_tools(
            params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            break
    offered = session.get_server_capabilities()
    resources: list[str] = []
    prompts: list[str] = []
    if offered is not None and offered.resources is not None:
        resources = [str(r.uri) for r in (await session.list_resources()).resources]
    if offered is not None and offered.prompts is not None:
        prompts = [p.name for p in (await session.list_prompts()).prompts]
    cap = server.max_tools
    return Listing(tools[:cap], resources[:cap], prompts[:cap])


def judge(server: McpServer, listing: Listing, store: EventStore,
          record: Recorder | None) -> Discovery:
    """Each listed tool against its baseline (see the module), recorded with
    ``record`` (None: the baselines only)."""
    emit = _emitter(record)
    found = [_judge_tool(server, tool, store, emit) for tool in listing.tools]
    for kind, names in (("resource", listing.resources), ("prompt", listing.prompts)):
        for name in names:
            emit(ev.McpCapabilityDiscovered(server=server.id, capability=name,
                                            capability_type=cast(Any, kind)))
    listed = {tool.name for tool in listing.tools}
    removed = tuple(row.capability for row in store.mcp_baselines(server.id)
                    if row.capability not in listed)
    for name in removed:
        emit(ev.McpCapabilityDriftDetected(server=server.id, capability=name,
                                           change="removed"))
    return Discovery(server.id, tuple(found), tuple(listing.resources),
                     tuple(listing.prompts), removed)


def _judge_tool(server: McpServer, tool: types.Tool, store: EventStore,
                emit: _Emit) -> DiscoveredTool:
    if server.allowed_tools and not any(fnmatch.fnmatchcase(tool.name, pattern)
                                        for pattern in server.allowed_tools):
        return DiscoveredTool(server.id, tool.name, ToolState.NOT_ALLOWED)
    contract = contract_of(tool)
    ids = _Ids(server=server.id, capability=contract.name)
    emit(ev.McpCapabilityDiscovered(**ids, capability_hash=contract.hash))
    level = effective_level(contract.declared, server.trust)
    emit(ev.McpCapabilityTrustEvaluated(**ids, trust=server.trust.value,
                                        declared=contract.declared, side_effect=level))
    spec, problem = _spec(server, contract)
    before = store.mcp_baseline(server.id, contract.name)
    change: Change | None = None
    if before is None or before.approved_hash != contract.hash:
        change = "added" if before is None or before.approved_hash is None else "changed"
        emit(ev.McpCapabilityDriftDetected(
            **ids, change=change, capability_hash=contract.hash,
            baseline_hash=before.approved_hash if before is not None else None))
    approve = problem is None and server.drift is DriftPolicy.ACCEPT
    row = store.observe_mcp_capability(server.id, contract.name, contract.hash,
                                       contract.body, level, approve=approve,
                                       by="drift-policy:accept" if approve else None)
    found = DiscoveredTool(server.id, contract.name, ToolState.QUARANTINED, contract.hash,
                           contract.declared, level, change, None, problem)
    if problem is not None or row.status != "approved":
        reason = f"invalid: {problem}" if problem is not None else \
            f"{change or 'pending'}: not accepted by an operator"
        emit(ev.McpCapabilityQuarantined(**ids, capability_hash=contract.hash, reason=reason))
        return found if problem is None else _invalid(found)
    if change is not None:
        emit(ev.McpCapabilityApproved(**ids, capability_hash=contract.hash,
                                      approved_by=row.decided_by))
    assert spec is not None
    emit(ev.McpToolNormalized(**ids, tool=spec.id, side_effect=spec.side_effect,
                              capability_hash=contract.hash))
    return DiscoveredTool(server.id, contract.name, ToolState.CALLABLE, contract.hash,
                          contract.declared, level, change, spec)


def _invalid(found: DiscoveredTool) -> DiscoveredTool:
    return DiscoveredTool(found.server, found.name, ToolState.INVALID, found.capability_hash,
                          found.declared, found.side_effect, found.change, None, found.problem)


def _spec(server: McpServer, contract: Contract) -> tuple[ToolSpec | None, str | None]:
    try:
        return tool_spec(server, contract), None
    except ToolSpecError as exc:
        return None, str(exc)


class _Ids(TypedDict):
    server: str
    capability: str


class _Emit:
    def __init__(self, record: Recorder | None) -> None:
        self.record = record

    def __call__(self, event: ev.Payload) -> None:
        if self.record is not None:
            self.record(event.kind, event.dump())


def _emitter(record: Recorder | None) -> _Emit:
    return _Emit(record)
