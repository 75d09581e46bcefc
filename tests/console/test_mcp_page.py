"""The console's MCP page: quarantined capabilities first, from the store's baselines
(a real discovery of a real MCP server process), then the approved."""

from __future__ import annotations

import sys
import uuid

from hypha_celery import Hypha
from hypha_celery.mcp import McpGateway, McpServer, StdioTransport
from tests.console.support import Tokens, app_for, client
from tests.mcp.conftest import SERVER


def test_the_mcp_page_shows_quarantined_capabilities_first(hypha: Hypha, t: Tokens) -> None:
    sid = f"console_{uuid.uuid4().hex[:8]}"
    server = McpServer(id=sid, trust="trusted", transport=StdioTransport(
        command=sys.executable, args=(str(SERVER), "stdio")))
    gateway = McpGateway([server], hypha.store)
    try:
        gateway.discover(sid)
        gateway.accept(sid, "echo", "alice")
    finally:
        gateway.close()
    page = client(app_for(hypha, t), t.admin).get("/mcp")
    assert page.status_code == 200 and 'id="mcp"' in page.text
    assert 'href="/mcp"' in page.text  # in the nav
    rows = page.text[page.text.index("<tbody>"):]
    forecast, echo = rows.index(f"{sid}.forecast"), rows.index(f"{sid}.echo")
    assert forecast < echo  # quarantined before approved
    assert '<tr class="quarantined"><td>' + sid in rows and "alice" in rows
