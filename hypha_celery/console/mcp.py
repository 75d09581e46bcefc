"""The console's MCP page (``/mcp``): the gateway's capabilities, quarantined first (a new
or changed tool no operator accepted: ``hypha mcp accept``), then the approved, from the
store's baselines. Names, levels, hashes and dates only (no schema, no content)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from hypha_celery.store import MAX_BASELINES, BaselineRow

if TYPE_CHECKING:
    from hypha_celery.console.app import Console
    from hypha_celery.console.pages import Endpoint

__all__ = ["CapabilityLine", "capability_line", "mcp"]


@dataclass(frozen=True, slots=True)
class CapabilityLine:
    """One row of the MCP page."""

    server: str
    tool: str
    status: str
    side_effect: str
    capability_hash: str
    approved_hash: str
    updated: str
    decided_by: str


def capability_line(row: BaselineRow) -> CapabilityLine:
    return CapabilityLine(row.server, row.capability, row.status, row.side_effect,
                          row.capability_hash[:12], (row.approved_hash or "-")[:12],
                          time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row.updated_at)),
                          row.decided_by or "-")


def mcp(console: Console) -> Endpoint:
    def page(request: Request) -> Response:
        hypha = console.scoped(request)
        rows = hypha.store.mcp_baselines(limit=MAX_BASELINES)
        lines = [capability_line(r) for r in sorted(
            rows, key=lambda r: (r.status != "quarantined", r.server, r.capability))]
        return console.render(request, "mcp.html", {
            "capabilities": lines, "limit": MAX_BASELINES,
            "quarantined": sum(line.status == "quarantined" for line in lines)})
    return page
